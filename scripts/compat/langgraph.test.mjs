// The LangGraph SDK (`@langchain/langgraph-sdk`) resumes through tether's conf/profiles/langgraph.toml.
// The scripted backend serves only `POST /threads/{tid}/runs/stream` as a LangGraph API server
// does: `Location: /threads/{tid}/runs/{rid}/stream`, `Content-Location`, `event: metadata`
// first with the run id, `id:` on every frame, CRLF line endings. The connection is cut mid-run
// and the SDK's client.runs.stream rejoins by itself (GET <Location> + Last-Event-ID) through
// tether; every event must arrive once, in order. Then client.runs.joinStream with lastEventId
// "-1" replays the whole run, a join at the last id is an empty stream, and an unknown run is 404.
// A second thread is stamped as LangGraph's in-memory runtime stamps events, `<ms>-0`, so that the
// token chunks of one millisecond share an id: tether relays each repeat as `<id>~<frame index>`
// (the profile's `ids = "unique"`), the SDK rejoins by itself from inside such a burst and gets
// the rest of it once, and joinStream resumes from either form of an id.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client } from "@langchain/langgraph-sdk";

import { cutPoint, relay, startBackend, startTether, words, writePaced } from "./support.mjs";

const TOKENS = words(40, 11);

/** The bursts of the in-memory runtime's stamps: token chunks eight to a millisecond. */
const BURST = 8;

/**
 * The id the server stamps on event `i`: `<ms>-<i>`, unique, or for a `thread-burst…` thread
 * `<ms>-0` with the token chunks (events 2 to 41) eight to a millisecond.
 */
function stamp(threadId, i) {
  if (!threadId.startsWith("thread-burst")) return `1760000000000-${i}`;
  const ms = i < 2 ? i : i <= TOKENS.length + 1 ? 2 + Math.floor((i - 2) / BURST) : 100 + i;
  return `${1760000000000 + ms}-0`;
}

/** The ids as tether relays them: the first of each id as is, a repeat `<id>~<frame index>`. */
function relayedIds(events) {
  const seen = new Set();
  return events.map((e, i) => {
    if (!seen.has(e.id)) {
      seen.add(e.id);
      return e;
    }
    return { ...e, id: `${e.id}~${i}` };
  });
}

/** The run's events as the SDK yields them ({event, data}), and their ids. */
function runEvents(threadId, runId) {
  const msgId = `run--${runId}`;
  const node = { langgraph_node: "agent", langgraph_step: 1, thread_id: threadId, run_id: runId };
  const events = [{ event: "metadata", data: { run_id: runId, attempt: 1 } }];
  events.push({ event: "values", data: { messages: [{ type: "human", content: "hi", id: "h1" }] } });
  for (const t of TOKENS) events.push({ event: "messages", data: [{ type: "AIMessageChunk", content: t, id: msgId }, node] });
  events.push({
    event: "values",
    data: { messages: [{ type: "human", content: "hi", id: "h1" }, { type: "ai", content: TOKENS.join(""), id: msgId }] },
  });
  return events.map((e, i) => ({ ...e, id: stamp(threadId, i) }));
}

/** sse-starlette's framing: id, event, data lines, CRLF. */
const frame = (e) => `id: ${e.id}\r\nevent: ${e.event}\r\ndata: ${JSON.stringify(e.data)}\r\n\r\n`;

let backend;
let tether;
let net;
const runs = new Map(); // thread id -> { runId, events, done }

before(async () => {
  backend = await startBackend(async (req, res, url, body) => {
    const m = /^\/threads\/([^/]+)\/runs\/stream$/.exec(url.pathname);
    if (req.method !== "POST" || !m) return false;
    assert.equal(body?.stream_resumable, true);
    const threadId = decodeURIComponent(m[1]);
    const runId = `1f0a${runs.size}c3e-0000-6000-8000-${String(Date.now()).padStart(12, "0")}`;
    const events = runEvents(threadId, runId);
    const headers = {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      location: `/threads/${threadId}/runs/${runId}/stream`,
      "content-location": `/threads/${threadId}/runs/${runId}`,
    };
    const done = writePaced(res, 200, headers, events.map(frame), 20);
    runs.set(threadId, { runId, events, done });
    await done;
    return true;
  });
  tether = await startTether("langgraph", backend.port);
  net = await relay(Number(new URL(tether.url).port));
});

after(async () => {
  await net?.close();
  await tether?.stop();
  await backend?.close();
});

const plain = (parts) => parts.map(({ id, event, data }) => ({ id, event, data }));

test("runs.stream rejoins by itself through tether after a cut: every event once, in order", async () => {
  const threadId = "thread-lg-1";
  // Every request the SDK makes, with what it had yielded by then (runs.stream does not pass an
  // onReconnect callback through, so the rejoin is seen here).
  const sent = [];
  const got = [];
  const onRequest = (url, init) => {
    const h = new Headers(init.headers);
    sent.push({ method: init.method, path: url.pathname, lastEventId: h.get("last-event-id"), seen: got.length });
    return init;
  };
  const client = new Client({ apiUrl: net.url, apiKey: null, onRequest });
  const cutAfter = cutPoint(5, 35, "langgraph");
  let created;
  for await (const part of client.runs.stream(threadId, "agent", {
    input: { messages: [{ role: "human", content: "hi" }] },
    streamMode: ["values", "messages-tuple"],
    streamResumable: true,
    onRunCreated: (meta) => {
      created = meta;
    },
  })) {
    got.push(part);
    if (got.length === cutAfter) assert.ok(net.cut() >= 1, "the relay had the run's stream open");
  }
  const { runId, events } = runs.get(threadId);
  assert.deepEqual(created, { run_id: runId, thread_id: threadId }, "the SDK read Content-Location");
  const rejoins = sent.filter((r) => r.method === "GET" && r.path === `/threads/${threadId}/runs/${runId}/stream`);
  assert.ok(rejoins.length >= 1, `the SDK rejoined at its Location after the cut: ${JSON.stringify(sent)}`);
  assert.equal(rejoins[0].lastEventId, events[rejoins[0].seen - 1].id, "with the id of the last event it had");
  assert.deepEqual(plain(got), events, "every event of the run once, in order, with the server's ids");

  const turns = backend.requests.filter((r) => r.startsWith("POST"));
  assert.deepEqual(turns, [`POST /threads/${threadId}/runs/stream`], "the backend saw the one turn");
  assert.ok(
    !backend.requests.some((r) => r.startsWith(`GET /threads/${threadId}/runs/${runId}/stream`)),
    "the rejoin was answered by tether, not the backend",
  );
});

test("joinStream after the run: -1 replays it all, the last id is an empty stream, unknown run 404", async () => {
  const threadId = "thread-lg-1";
  const { runId, events, done } = runs.get(threadId);
  await done;
  const client = new Client({ apiUrl: tether.url, apiKey: null });
  const all = [];
  for await (const part of client.runs.joinStream(threadId, runId, { lastEventId: "-1" })) all.push(part);
  assert.deepEqual(plain(all), events, "-1: the whole run from tether's record");

  const none = [];
  for await (const part of client.runs.joinStream(threadId, runId, { lastEventId: events.at(-1).id })) none.push(part);
  assert.deepEqual(none, [], "nothing after the last id: an empty stream, no error");

  const tail = [];
  for await (const part of client.runs.joinStream(threadId, runId, { lastEventId: events[30].id })) tail.push(part);
  assert.deepEqual(plain(tail), events.slice(31), "the frames after a given id");

  await assert.rejects(
    async () => {
      for await (const _ of client.runs.joinStream(threadId, "1f0a9999-0000-6000-8000-000000000000", { lastEventId: "-1" }));
    },
    (e) => /404/.test(String(e?.status ?? e?.message ?? e)),
    "an unknown run: 404, which the SDK throws",
  );
  assert.ok(!backend.requests.some((r) => r.includes("/stream") && r.startsWith("GET")), "no join reached the backend");
});

test("a burst of one id: runs.stream rejoins from inside it and gets the rest of it once", async () => {
  const threadId = "thread-burst-1";
  const sent = [];
  const got = [];
  const onRequest = (url, init) => {
    const h = new Headers(init.headers);
    sent.push({ method: init.method, path: url.pathname, lastEventId: h.get("last-event-id"), seen: got.length });
    return init;
  };
  const client = new Client({ apiUrl: net.url, apiKey: null, onRequest });
  // Cut after one of the first five chunks of a burst (events 2..41, eight to an id): the SDK may
  // read a frame or two more before the cut lands, and still holds an id inside the burst.
  const k = cutPoint(0, (TOKENS.length / BURST) * 5 - 1, "langgraph burst (burst * 5 + chunk)");
  const cutAfter = 2 + Math.floor(k / 5) * BURST + (k % 5) + 1;
  console.log(`# langgraph burst: that is after ${cutAfter} events, chunk ${(k % 5) + 1} of burst ${Math.floor(k / 5) + 1}`);
  for await (const part of client.runs.stream(threadId, "agent", {
    input: { messages: [{ role: "human", content: "hi" }] },
    streamMode: ["values", "messages-tuple"],
    streamResumable: true,
  })) {
    got.push(part);
    if (got.length === cutAfter) assert.ok(net.cut() >= 1, "the relay had the run's stream open");
  }
  const { runId, events } = runs.get(threadId);
  const relayed = relayedIds(events);
  assert.ok(events.filter((e) => e.id === events[2].id).length === BURST, "the server stamped a burst");
  const rejoins = sent.filter((r) => r.method === "GET" && r.path === `/threads/${threadId}/runs/${runId}/stream`);
  assert.ok(rejoins.length >= 1, `the SDK rejoined at its Location after the cut: ${JSON.stringify(sent)}`);
  const at = rejoins[0].seen - 1;
  assert.equal(rejoins[0].lastEventId, relayed[at].id, "with the id, as tether relayed it, of the last event it had");
  assert.equal(events[at + 1].id, events[at].id, `the rejoin was inside a burst (after event ${at})`);
  assert.deepEqual(plain(got), relayed, "every event of the run once, in order, each repeat's id made unique");
  assert.equal(new Set(got.map((p) => p.id)).size, events.length, "every id names one event");
  assert.deepEqual(
    got.map((p) => p.data),
    events.map((e) => e.data),
    "every token chunk of the burst once",
  );
  assert.ok(
    !backend.requests.some((r) => r.startsWith(`GET /threads/${threadId}/runs/${runId}/stream`)),
    "the rejoin was answered by tether, not the backend",
  );
});

test("a burst of one id: joinStream resumes right after the frame of either form of its id", async () => {
  const threadId = "thread-burst-1";
  const { runId, events, done } = runs.get(threadId);
  await done;
  const relayed = relayedIds(events);
  const client = new Client({ apiUrl: tether.url, apiKey: null });
  const join = async (lastEventId) => {
    const parts = [];
    for await (const part of client.runs.joinStream(threadId, runId, { lastEventId })) parts.push(part);
    return plain(parts);
  };
  const first = 2 + BURST; // the second burst's first event: the plain id
  assert.equal(relayed[first].id, events[first].id);
  assert.deepEqual(await join(events[first].id), relayed.slice(first + 1), "the plain id: after the burst's first");
  assert.match(relayed[first + 3].id, /~\d+$/);
  assert.deepEqual(await join(relayed[first + 3].id), relayed.slice(first + 4), "a suffixed id: after its own frame");
  assert.deepEqual(await join("-1"), relayed, "-1: the whole run, as relayed");
});
