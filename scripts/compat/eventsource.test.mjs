// The `eventsource` npm package (a spec-compliant EventSource) resumes through tether's
// conf/profiles/eventsource.toml: a scripted backend that only serves `GET /events?chat_id=`
// with id-less frames; tether injects `id:` lines, the connection is cut mid-turn, and the
// polyfill's own reconnect (Last-Event-ID) is answered from tether's record. Every data frame
// must arrive exactly once and in order; once the turn is over the reconnect gets 204 and the
// EventSource closes for good. The backend must see one request per turn.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { EventSource } from "eventsource";

import { cutPoint, relay, startBackend, startTether, words, writePaced } from "./support.mjs";

const N = 45;
const TEXT = words(N, 3);

/** Frame i's data: what the client must see once each, in order. */
const dataOf = (chatId, i) => JSON.stringify({ chat_id: chatId, i, text: TEXT[i] });

let backend;
let tether;
let net;

before(async () => {
  backend = await startBackend(async (req, res, url) => {
    if (req.method !== "GET" || url.pathname !== "/events") return false;
    const chatId = url.searchParams.get("chat_id");
    // A real backend's stream: a short reconnect delay first, then data-only frames (no id:).
    const n = chatId.startsWith("short") ? 3 : N;
    const frames = Array.from({ length: n }, (_, i) => `${i === 0 ? "retry: 150\n" : ""}data: ${dataOf(chatId, i)}\n\n`);
    await writePaced(res, 200, { "content-type": "text/event-stream", "cache-control": "no-cache" }, frames, 20);
    return true;
  });
  tether = await startTether("eventsource", backend.port);
  net = await relay(Number(new URL(tether.url).port));
});

after(async () => {
  await net?.close();
  await tether?.stop();
  await backend?.close();
});

test("a cut EventSource resumes from tether: every frame once, in order, then 204 closes it", async () => {
  const chatId = "es-chat-1";
  const cutAfter = cutPoint(5, 35, "eventsource");
  const es = new EventSource(`${net.url}/events?chat_id=${chatId}`);
  const got = [];
  const ids = [];
  const errors = [];
  let opens = 0;
  const closed = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`EventSource still open; got ${got.length} frames`)), 30_000);
    es.onopen = () => {
      opens += 1;
    };
    es.onmessage = (e) => {
      got.push(e.data);
      ids.push(e.lastEventId);
      if (got.length === cutAfter) assert.ok(net.cut() >= 1, "the relay had the stream open");
    };
    es.onerror = (e) => {
      errors.push(e);
      if (es.readyState === EventSource.CLOSED) {
        clearTimeout(timer);
        resolve();
      }
    };
  });
  await closed;

  assert.deepEqual(got, Array.from({ length: N }, (_, i) => dataOf(chatId, i)), "every frame once, in order");
  assert.ok(ids.every((id) => /^.+:\d+$/.test(id)), `tether's injected ids <run_id>:<index>: ${ids.slice(0, 3)}`);
  assert.equal(new Set(ids).size, N, "one id per frame");
  assert.ok(opens >= 2, `the polyfill reconnected after the cut (opens: ${opens})`);
  const last = errors.at(-1);
  assert.equal(last.code, 204, `the final reconnect was answered 204: ${last.message}`);
  assert.equal(es.readyState, EventSource.CLOSED, "204 closes the EventSource for good");
  assert.deepEqual(
    backend.requests,
    [`GET /events?chat_id=${chatId}`],
    "the backend saw the turn once: the resumes were answered by tether",
  );
});

test("nothing to resume: a Last-Event-ID tether does not know is a new turn, sent to the backend", async () => {
  const chatId = "short-es-2";
  const before = backend.requests.length;
  const res = await fetch(`${tether.url}/events?chat_id=${chatId}`, {
    headers: { accept: "text/event-stream", "last-event-id": "no-such-run:7" },
  });
  assert.equal(res.status, 200);
  const body = await res.text();
  for (let i = 0; i < 3; i++) assert.ok(body.includes(`data: ${dataOf(chatId, i)}`), body);
  assert.deepEqual(backend.requests.slice(before), [`GET /events?chat_id=${chatId}`]);

  // Its Last-Event-ID at the end of that (ended) turn: nothing after it, 204, and no new turn.
  const lastId = [...body.matchAll(/^id: (.+)$/gm)].map((m) => m[1]).at(-1);
  assert.ok(lastId, `tether injected ids: ${body}`);
  const again = await fetch(`${tether.url}/events?chat_id=${chatId}`, { headers: { "last-event-id": lastId } });
  assert.equal(again.status, 204);
  assert.equal(backend.requests.length, before + 1, "the 204 did not reach the backend");
});
