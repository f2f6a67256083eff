// Durable Streams readers through tether's conf/profiles/durable-streams.toml: a scripted backend
// answers `POST /chat` with a paced AG-UI stream, and the official TypeScript client
// (`@durable-streams/client`) reads the turn as a read-only Durable Stream in JSON mode: a
// catch-up read, a long-poll live read and an SSE live read (each must end with every event once
// and the closing STREAM_END message, `persisted` included), a reader cut mid-turn that resumes
// from its saved offset, HEAD, an unknown stream and a refused write. The client library is the
// oracle: the protocol's server conformance suite writes its own streams, which tether does not.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { DurableStream, stream } from "@durable-streams/client";

import { cutPoint, relay, startBackend, startTether, words, writePaced } from "./support.mjs";

const DELTAS = words(40, 3);
const FULL_TEXT = DELTAS.join("");

/** The backend's AG-UI events for one turn. */
function turnEvents(chatId) {
  return [
    { type: "RUN_STARTED", threadId: chatId, runId: "r" },
    { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
    ...DELTAS.map((delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta })),
    { type: "TEXT_MESSAGE_END", messageId: "m1" },
    { type: "RUN_FINISHED", threadId: chatId, runId: "r" },
  ];
}

let backend;
let tether;
let net;

before(async () => {
  backend = await startBackend(async (req, res, url, body) => {
    if (req.method !== "POST" || url.pathname !== "/chat") return false;
    const frames = turnEvents(body.chat_id).map((e) => `data: ${JSON.stringify(e)}\n\n`);
    await writePaced(res, 200, { "content-type": "text/event-stream" }, frames, 15);
    return true;
  });
  tether = await startTether("durable-streams", backend.port);
  net = await relay(Number(new URL(tether.url).port));
});

after(async () => {
  await net?.close();
  await tether?.stop();
  await backend?.close();
});

/** Starts a turn as a protocol-1 requester; resolves with tether's run id and the body's end. */
async function startTurn(chatId) {
  const res = await fetch(`${tether.url}/chat`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ chat_id: chatId, protocol: 1, messages: [] }),
  });
  assert.equal(res.status, 200);
  const runId = res.headers.get("x-tether-run-id");
  assert.ok(runId, "the record response names the run");
  return { runId, done: res.text() };
}

/** Checks what a reader got: the turn's events once each, in order, then the end message. */
function assertWhole(items, chatId, runId) {
  const end = items.at(-1);
  assert.equal(end.type, "STREAM_END");
  assert.equal(end.run_id, runId);
  assert.equal(end.persisted, true, "the reader sees that the answer was saved");
  assert.deepEqual(items.slice(0, -1), turnEvents(chatId), "every event once, in order");
  const text = items.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
  assert.equal(text, FULL_TEXT);
}

/** Subscribes to `res`, resolving with every item once the stream reports that it closed. */
function collect(res) {
  const items = [];
  const batches = [];
  return new Promise((resolve, reject) => {
    res.subscribeJson((batch) => {
      items.push(...batch.items);
      batches.push({ offset: batch.offset, upToDate: batch.upToDate, closed: batch.streamClosed });
      if (batch.streamClosed) resolve({ items, batches });
    });
    res.closed.catch(reject);
  });
}

test("a finished turn: a catch-up read gets its events and the end message; HEAD says closed", async () => {
  const chatId = "ds-catch-up";
  const { runId, done } = await startTurn(chatId);
  await done;
  const url = `${tether.url}/v1/stream/chats/${chatId}`;
  const res = await stream({ url, offset: "-1", live: false });
  const items = await res.json();
  assertWhole(items, chatId, runId);
  assert.equal(res.streamClosed, true);
  const head = await DurableStream.head({ url });
  assert.equal(head.exists, true);
  assert.equal(head.streamClosed, true);
  assert.equal(head.offset, res.offset, "HEAD's tail is where the read ended");
  // The run's own URL is the same stream.
  const byRun = await stream({ url: `${tether.url}/v1/stream/runs/${runId}`, live: false });
  assert.deepEqual(await byRun.json(), items);
});

for (const live of ["long-poll", "sse"]) {
  test(`a live turn read with live=${live}: every event once, then closed`, async () => {
    const chatId = `ds-live-${live}`;
    const { runId, done } = await startTurn(chatId);
    const urls = [];
    const recorded = (u, init) => {
      urls.push(new URL(u));
      return fetch(u, init);
    };
    const url = `${tether.url}/v1/stream/runs/${runId}`;
    const res = await stream({ url, offset: "-1", live, fetch: recorded });
    const { items, batches } = await collect(res);
    assertWhole(items, chatId, runId);
    assert.ok(batches.length > 1, "the turn arrived in several batches while it was produced");
    assert.ok(
      urls.some((u) => u.searchParams.get("live") === live),
      `the client read live with ${live}: ${urls.map((u) => u.search).join(" ")}`,
    );
    await res.closed;
    await done;
  });
}

test("a reader cut mid-turn resumes from its saved offset: nothing missed, nothing repeated", async () => {
  const chatId = "ds-cut";
  const { runId, done } = await startTurn(chatId);
  const cutAfter = cutPoint(3, 30, "durable-streams");
  const first = await stream({ url: `${net.url}/v1/stream/chats/${chatId}`, offset: "-1", live: "sse" });
  const before = [];
  const saved = await new Promise((resolve) => {
    const stop = first.subscribeJson((batch) => {
      before.push(...batch.items);
      if (before.length >= cutAfter || batch.streamClosed) {
        stop();
        first.cancel();
        net.cut();
        resolve(batch.offset);
      }
    });
  });
  await first.closed.catch(() => {});
  const rest = await stream({ url: `${tether.url}/v1/stream/chats/${chatId}`, offset: saved, live: "sse" });
  const { items } = before.at(-1)?.type === "STREAM_END" ? { items: [] } : await collect(rest);
  rest.cancel();
  assertWhole([...before, ...items], chatId, runId);
  await done;
});

test("a new turn does not take over a saved offset of the chat's older turn", async () => {
  const chatId = "ds-two-turns";
  const one = await startTurn(chatId);
  await one.done;
  const mid = await stream({ url: `${tether.url}/v1/stream/chats/${chatId}`, live: false });
  const firstTurn = await mid.json();
  const two = await startTurn(chatId);
  await two.done;
  // From the start, the chat's stream is its current (second) turn.
  const current = await stream({ url: `${tether.url}/v1/stream/chats/${chatId}`, live: false });
  assertWhole(await current.json(), chatId, two.runId);
  // The first reader's saved offset (its end) still names the first turn: closed, nothing new.
  const again = await stream({ url: `${tether.url}/v1/stream/chats/${chatId}`, offset: mid.offset, live: false });
  assert.deepEqual(await again.json(), []);
  assert.equal(again.streamClosed, true);
  assertWhole(firstTurn, chatId, one.runId);
});

test("an unknown stream is not found, and a write is refused without reaching the backend", async () => {
  const before = backend.requests.length;
  await assert.rejects(
    stream({ url: `${tether.url}/v1/stream/chats/never-ran`, live: false }),
    (e) => e.status === 404,
  );
  assert.equal((await DurableStream.head({ url: `${tether.url}/v1/stream/runs/nosuchrun` })).exists, false);
  const handle = new DurableStream({ url: `${tether.url}/v1/stream/chats/ds-catch-up`, contentType: "application/json" });
  await assert.rejects(handle.append(JSON.stringify({ x: 1 })), (e) => e.status === 405);
  await assert.rejects(
    DurableStream.create({ url: `${tether.url}/v1/stream/chats/new`, contentType: "application/json" }),
    (e) => e.status === 405,
  );
  assert.equal(backend.requests.length, before, "tether answered every one");
});
