// TetherAgent driven through @ag-ui/client's own API (runAgent, connectAgent, subscribers,
// agent.messages) against an in-process HTTP server that speaks protocol 1 from the golden
// streams of tests/fixtures/protocol1/: cut mid-stream and resumed from the cursor, reset by a
// snapshot mid-run, attached on page load, stopped. The reference for every final
// `agent.messages` is @ag-ui/client's plain HttpAgent reading the same turn's AG-UI events with
// no tether in between.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { HttpAgent } from "@ag-ui/client";

import { TetherAgent, eventsAfter } from "../../dist/tether-agent.js";
import { blocks, fixtureText, frameText, frames } from "../support/harness.mjs";

const RECORD = fixtureText("record.sse");
const RECORD_FRAMES = frames(RECORD);
const RUN = RECORD_FRAMES[0].run_id;
const RECORD_EVENTS = RECORD_FRAMES.filter((f) => f.type === "STREAM_EVENT").map((f) => f.event);
const END = RECORD_FRAMES.at(-1);

/** Adjacent AG-UI deltas merged as tether compacts a snapshot (docs/protocol.md section 6). */
function compact(events) {
  const KEY = { TEXT_MESSAGE_CONTENT: "messageId", REASONING_MESSAGE_CONTENT: "messageId", TOOL_CALL_ARGS: "toolCallId" };
  const out = [];
  for (const e of events) {
    const prev = out.at(-1);
    const k = KEY[e.type];
    if (k && prev && prev.type === e.type && prev[k] === e[k]) out[out.length - 1] = { ...prev, delta: prev.delta + e.delta };
    else out.push({ ...e });
  }
  return out;
}

// ---- a scripted server ----

let server;
let base;
/** HttpAgent's result for the record run, read without tether. */
let REF;
/** The handler of the next requests: `(req, body, res) => void`. */
let handler = () => {
  throw new Error("no handler");
};
const requests = [];

before(async () => {
  server = createServer((req, res) => {
    let data = "";
    req.on("data", (c) => (data += c));
    req.on("end", () => {
      const body = data ? JSON.parse(data) : null;
      requests.push({ method: req.method, path: req.url, body, headers: req.headers });
      handler(req, body, res);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${server.address().port}`;
  REF = await reference(RECORD_EVENTS);
  assert.ok(REF.messages.length >= 2, "the reference run has the user's and the assistant's messages");
});
after(() => {
  server.closeAllConnections();
  server.close();
});

function serve(fn) {
  handler = fn;
  requests.length = 0;
}

function sseHead(res, runId) {
  const h = { "content-type": "text/event-stream", "cache-control": "no-cache" };
  if (runId) h["x-tether-run-id"] = runId;
  res.writeHead(200, h);
}

/** Writes `text`, then ends cleanly (`cut` false) or resets the connection (`cut` true). */
function write(res, text, { cut = false } = {}) {
  res.write(text, () => {
    if (cut) setTimeout(() => res.socket?.destroy(), 5);
    else res.end();
  });
}

/** The frames of the record run after `after_seq`, and its end. */
function replayAfter(seq) {
  return RECORD_FRAMES.filter((f) => f.type !== "STREAM_SNAPSHOT" && (f.seq > seq || f.type === "STREAM_END"))
    .map(frameText)
    .join("");
}

function agent(extra = {}) {
  return new TetherAgent({
    url: `${base}/chat`,
    threadId: "t1",
    initialMessages: [{ id: "u1", role: "user", content: "hi" }],
    client: { initialBackoffMs: 0, maxBackoffMs: 0, settleMs: 5, visibility: null, online: null },
    ...extra,
  });
}

/** Counts each text delta the library applied, per message. */
function deltaCounter() {
  const seen = {};
  return {
    seen,
    subscriber: {
      onTextMessageContentEvent({ event }) {
        seen[event.messageId] = (seen[event.messageId] ?? "") + event.delta;
      },
    },
  };
}

/** What @ag-ui/client's HttpAgent makes of `events` served as a plain AG-UI stream (no tether). */
async function reference(events) {
  const text = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("");
  serve((_req, _body, res) => {
    sseHead(res);
    write(res, text);
  });
  const plain = new HttpAgent({ url: `${base}/plain`, threadId: "t1", initialMessages: [{ id: "u1", role: "user", content: "hi" }] });
  const counter = deltaCounter();
  await plain.runAgent({}, counter.subscriber);
  return { messages: plain.messages, deltas: counter.seen };
}


describe("TetherAgent: a run", () => {
  test("posts the AG-UI RunAgentInput with protocol 1 and the thread as chat_id; ends as HttpAgent's run", async () => {
    serve((req, _body, res) => {
      assert.equal(req.url, "/chat");
      sseHead(res, RUN);
      write(res, RECORD);
    });
    const a = agent({ headers: { authorization: "Bearer x" } });
    const counter = deltaCounter();
    const result = await a.runAgent({ forwardedProps: { pace_ms: 0 } }, counter.subscriber);
    assert.equal(requests.length, 1);
    const { body, headers } = requests[0];
    assert.equal(body.protocol, 1);
    assert.equal(body.chat_id, "t1");
    assert.equal(body.threadId, "t1");
    assert.equal(typeof body.runId, "string");
    assert.deepEqual(body.messages, [{ id: "u1", role: "user", content: "hi" }]);
    assert.deepEqual(body.forwardedProps, { pace_ms: 0 });
    assert.equal(headers.authorization, "Bearer x");
    assert.deepEqual(a.messages, REF.messages);
    assert.deepEqual(counter.seen, REF.deltas);
    assert.deepEqual(result.newMessages, REF.messages.slice(1));
    assert.equal(a.lastEnd.persisted, true);
    assert.equal(a.isRunning, false);
  });

  test("a connection cut at every frame boundary and mid-frame resumes from the cursor: same messages, each delta once", async () => {
    const bs = blocks(RECORD);
    const bytes = Buffer.from(RECORD);
    const cuts = [];
    for (const b of bs.slice(0, -1)) cuts.push(b.start + Math.floor((b.end - b.start) / 2), b.end);
    for (const at of cuts) {
      serve((req, body, res) => {
        if (req.url === "/chat") {
          sseHead(res, RUN);
          write(res, bytes.subarray(0, at), { cut: true });
          return;
        }
        assert.equal(req.url, "/chat/live");
        assert.equal(body.protocol, 1);
        assert.equal(body.chat_id, "t1");
        sseHead(res, RUN);
        if (body.run_id === RUN) {
          write(res, replayAfter(body.after_seq));
        } else {
          // Cut before the run id was known: tether sends a snapshot of the chat's run.
          write(res, frameText({ type: "STREAM_SNAPSHOT", run_id: RUN, seq: 0, events: [] }) + replayAfter(0));
        }
      });
      const a = agent();
      const counter = deltaCounter();
      await a.runAgent({}, counter.subscriber);
      assert.deepEqual(a.messages, REF.messages, `cut at byte ${at}`);
      assert.deepEqual(counter.seen, REF.deltas, `cut at byte ${at}: each delta applied once`);
      assert.ok(requests.some((r) => r.path === "/chat/live"), `cut at byte ${at} re-attached`);
    }
  });

  test("a mid-run snapshot of the same run (cursor outside the window) continues after what was shown, inside a merged delta too", async () => {
    // Cut after every event; the re-attach is answered with a snapshot up to a later seq, then the rest.
    const eventFrames = RECORD_FRAMES.filter((f) => f.type === "STREAM_EVENT");
    for (let k = 1; k < eventFrames.length; k++) {
      const upTo = Math.min(eventFrames.length, k + 3);
      serve((req, body, res) => {
        sseHead(res, RUN);
        if (req.url === "/chat") {
          write(res, [RECORD_FRAMES[0], ...eventFrames.slice(0, k)].map(frameText).join(""), { cut: true });
          return;
        }
        assert.deepEqual({ run_id: body.run_id, after_seq: body.after_seq }, { run_id: RUN, after_seq: k });
        const snap = { type: "STREAM_SNAPSHOT", run_id: RUN, seq: upTo, events: compact(RECORD_EVENTS.slice(0, upTo)) };
        write(res, frameText(snap) + replayAfter(upTo));
      });
      const a = agent();
      const counter = deltaCounter();
      await a.runAgent({}, counter.subscriber);
      assert.deepEqual(a.messages, REF.messages, `cut after seq ${k}`);
      assert.deepEqual(counter.seen, REF.deltas, `cut after seq ${k}: each delta applied once`);
    }
  });

  test("the golden lagged-observer stream (snapshot_reset.sse): the snapshot's text is not applied twice", async () => {
    const text = fixtureText("snapshot_reset.sse");
    const fs = frames(text);
    const snap = fs.find((f) => f.type === "STREAM_SNAPSHOT" && f.seq > 0);
    const ref = await reference([...snap.events, ...fs.filter((f) => f.type === "STREAM_EVENT" && f.seq > snap.seq).map((f) => f.event)]);
    serve((_req, _body, res) => {
      sseHead(res, fs[0].run_id);
      write(res, text);
    });
    const a = agent();
    const counter = deltaCounter();
    await a.runAgent({}, counter.subscriber);
    assert.deepEqual(a.messages, ref.messages);
    assert.deepEqual(counter.seen, ref.deltas);
  });

  test("a snapshot of another run replaces the run's messages (MESSAGES_SNAPSHOT rebuilt by the library's reducer)", async () => {
    const other = frames(fixtureText("attach_snapshot.sse"));
    const otherRun = other[0].run_id;
    const otherEvents = [...other[0].events, ...other.filter((f) => f.type === "STREAM_EVENT").map((f) => f.event)];
    const ref = await reference(otherEvents);
    const eventFrames = RECORD_FRAMES.filter((f) => f.type === "STREAM_EVENT");
    serve((req, _body, res) => {
      if (req.url === "/chat") {
        sseHead(res, RUN);
        write(res, [RECORD_FRAMES[0], ...eventFrames.slice(0, 12)].map(frameText).join(""), { cut: true });
        return;
      }
      sseHead(res, otherRun);
      write(res, other.map(frameText).join(""));
    });
    const a = agent();
    await a.runAgent();
    assert.deepEqual(a.messages, ref.messages);
  });

  test("a run tether no longer has (204 on re-attach) rejects runAgent with run_lost", async () => {
    serve((req, _body, res) => {
      if (req.url === "/chat") {
        sseHead(res, RUN);
        write(res, RECORD_FRAMES.slice(0, 6).map(frameText).join(""), { cut: true });
        return;
      }
      res.writeHead(204);
      res.end();
    });
    const a = agent();
    const errors = [];
    const origError = console.error;
    console.error = () => {};
    try {
      await assert.rejects(a.runAgent({}, { onRunFailed: ({ error }) => void errors.push(error) }), (e) => e.code === "run_lost");
    } finally {
      console.error = origError;
    }
    assert.equal(errors[0].code, "run_lost");
  });

  test("abortRun() stops the run at tether and ends the run at once", async () => {
    serve((req, body, res) => {
      if (req.url === "/chat") {
        sseHead(res, RUN);
        res.write(RECORD_FRAMES.slice(0, 5).map(frameText).join("")); // then stays open
        return;
      }
      assert.equal(req.url, "/chat/stop");
      assert.equal(body.chat_id, "t1");
      assert.equal(body.run_id, RUN);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ run_id: RUN, execution_stopped: true, terminal_persisted: false }));
    });
    const a = agent();
    let started;
    const seen = new Promise((r) => (started = r));
    const run = a.runAgent({}, { onRunStartedEvent: () => started() });
    await seen;
    a.abortRun();
    await run;
    for (let i = 0; i < 50 && !requests.some((r) => r.path === "/chat/stop"); i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(requests.some((r) => r.path === "/chat/stop"));
    assert.equal(a.isRunning, false);
  });
});

describe("TetherAgent: connectAgent() on page load", () => {
  test("attaches to the thread's in-flight run: the snapshot, then the live tail", async () => {
    const text = fixtureText("attach_snapshot.sse");
    const fs = frames(text);
    const ref = await reference([...fs[0].events, ...fs.filter((f) => f.type === "STREAM_EVENT").map((f) => f.event)]);
    serve((req, body, res) => {
      assert.equal(req.url, "/chat/live");
      assert.deepEqual(body, { chat_id: "t1", protocol: 1 });
      sseHead(res, fs[0].run_id);
      write(res, text);
    });
    const a = agent();
    const counter = deltaCounter();
    const result = await a.connectAgent({}, counter.subscriber);
    assert.deepEqual(a.messages, ref.messages);
    assert.deepEqual(counter.seen, ref.deltas);
    assert.deepEqual(result.newMessages, ref.messages.slice(1));
  });

  test("with nothing in flight (204) it resolves at once and changes nothing", async () => {
    serve((_req, _body, res) => {
      res.writeHead(204);
      res.end();
    });
    const a = agent();
    const result = await a.connectAgent();
    assert.deepEqual(result.newMessages, []);
    assert.deepEqual(a.messages, [{ id: "u1", role: "user", content: "hi" }]);
  });
});

describe("eventsAfter", () => {
  const d = (delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta });
  test("continues a merged delta with its remainder, and returns null when the snapshot is not of what was applied", () => {
    const snap = [{ type: "RUN_STARTED" }, d("hello world"), { type: "TEXT_MESSAGE_END", messageId: "m" }];
    assert.deepEqual(eventsAfter([], snap), snap);
    assert.deepEqual(eventsAfter([snap[0], d("hel"), d("lo ")], snap), [d("world"), snap[2]]);
    assert.deepEqual(eventsAfter([snap[0], d("hello world")], snap), [snap[2]]);
    assert.deepEqual(eventsAfter(snap, snap), []);
    assert.equal(eventsAfter([snap[0], d("help")], snap), null);
    assert.equal(eventsAfter([{ type: "RUN_STARTED", runId: "x" }], snap), null);
    assert.equal(eventsAfter([...snap, { type: "RUN_FINISHED" }], snap), null);
  });
});
