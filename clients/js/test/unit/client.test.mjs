// The library against golden protocol-1 streams (tests/fixtures/protocol1/): cut at every byte
// and frame boundary, dropped and resumed, duplicated, reset by a snapshot, superseded, stopped,
// and ended without STREAM_END.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { TetherClient, TetherError, backoffDelay } from "../../dist/tether-client.js";
import {
  FakeTether,
  assertOrdered,
  blocks,
  cursorOf,
  cut,
  fakeFetch,
  fixtureText,
  frames,
  golden,
  json,
  quick,
  reduce,
  sse,
  watch,
} from "../support/harness.mjs";

const RECORD = fixtureText("record.sse");
const RECORD_BYTES = Buffer.from(RECORD, "utf8");
const RUN = frames(RECORD)[0].run_id;
const HEAD = frames(RECORD).at(-1).seq; // the run's last seq: one event per seq from 1

const rec = (chunks, opts = {}) => sse(chunks, { headers: { "x-tether-run-id": RUN }, ...opts });

/** A client whose record route answers `record(req)` and attach route `attach(req)`. */
function setup({ record, attach, stop, status, options = {} }) {
  const f = fakeFetch((req) => {
    if (req.path.endsWith("/chat")) return record(req);
    if (req.path.endsWith("/chat/live")) return attach(req);
    if (req.path.endsWith("/chat/stop")) return stop(req);
    if (req.path.endsWith("/chat/run")) return status(req);
    throw new Error(`unexpected ${req.method} ${req.url}`);
  });
  const client = new TetherClient(quick({ fetch: f.fetch, ...options }));
  return { client, calls: f.calls };
}

/** The offsets where each block of `text` ends, and one in the middle of each. */
function boundaries(text) {
  const out = [];
  for (const b of blocks(text)) out.push(b.start + Math.floor((b.end - b.start) / 2), b.end);
  return out.filter((o) => o < Buffer.byteLength(text));
}

/** The last complete frame in `bytes[0..offset)`. */
function lastFrameBefore(text, offset) {
  return blocks(text)
    .filter((b) => b.frame && b.end <= offset)
    .at(-1)?.frame;
}

describe("a recorded turn", () => {
  test("sends protocol 1 with the app's fields and query, and walks connecting, synchronizing, live, ended", async () => {
    const { client, calls } = setup({ record: () => rec([RECORD]) });
    const turn = client.send({ chat_id: "c1", message: "hi" }, { query: { pace_ms: 20 } });
    assert.equal(turn.state, "connecting");
    const w = watch(turn);
    const end = await turn.done;
    assert.deepEqual(calls[0].body, { chat_id: "c1", message: "hi", protocol: 1 });
    assert.equal(calls[0].method, "POST");
    assert.equal(calls[0].query.get("pace_ms"), "20");
    assert.deepEqual(w.states, ["connecting", "synchronizing", "live", "ended"]);
    assert.deepEqual(reduce(w.events), golden("record").state);
    assert.deepEqual({ persisted: end.persisted, superseded: end.superseded }, golden("record").end);
    assert.equal(end.next_run_id, null);
    assert.equal(end.reason, null);
    assert.equal(end.run_id, RUN);
    assert.deepEqual(turn.cursor, { run_id: RUN, after_seq: HEAD });
    assertOrdered(assert, w);
  });

  test("gives the same state however the stream is cut into reads (every byte offset)", async () => {
    const want = golden("record").state;
    for (let i = 1; i < RECORD_BYTES.length; i++) {
      const { client } = setup({ record: () => rec(cut(RECORD_BYTES, [i])) });
      const turn = client.send({ chat_id: "c1" });
      const w = watch(turn);
      const end = await turn.done;
      assert.equal(end.persisted, true, `cut at ${i}`);
      assert.deepEqual(reduce(w.events), want, `cut at ${i}`);
      assert.equal(w.seqs.length, HEAD, `cut at ${i}`);
    }
  });

  test("gives the same state one byte per read (UTF-8 split inside characters)", async () => {
    const chunks = [...RECORD_BYTES].map((b) => Uint8Array.of(b));
    const { client } = setup({ record: () => rec(chunks) });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done;
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("sends the headers option on every request, a function evaluated each time", async () => {
    let n = 0;
    const { client, calls } = setup({
      record: () => rec([RECORD_BYTES.subarray(0, 300)], { end: "error" }),
      attach: (req) => sse([new FakeTether(RECORD).answer(cursorOf(req))]),
      options: { headers: () => ({ authorization: `Bearer t${++n}` }) },
    });
    await client.send({ chat_id: "c1" }).done;
    assert.deepEqual(
      calls.map((c) => c.headers.authorization),
      ["Bearer t1", "Bearer t2"],
    );
  });
});

describe("a dropped connection", () => {
  test("resumes from the last complete frame after a cut at every frame boundary and mid-frame", async () => {
    const want = golden("record").state;
    const tether = new FakeTether(RECORD);
    const offsets = boundaries(RECORD);
    for (const [k, i] of offsets.entries()) {
      const { client, calls } = setup({
        record: () => rec(cut(RECORD_BYTES.subarray(0, i), [Math.floor(i / 2)]), { end: k % 2 ? "error" : "close" }),
        attach: (req) => sse([tether.answer(cursorOf(req))]),
      });
      const turn = client.send({ chat_id: "c1" });
      const w = watch(turn);
      const end = await turn.done;
      const before = lastFrameBefore(RECORD, i);
      assert.deepEqual(calls[1].body, { chat_id: "c1", protocol: 1, run_id: RUN, after_seq: before?.seq ?? 0 }, `cut at ${i}`);
      assert.equal(end.persisted, true);
      assert.deepEqual(reduce(w.events), want, `cut at ${i}`);
      assert.ok(w.states.includes("reconnecting"), `cut at ${i}: ${w.states}`);
      assert.equal(w.states.indexOf("ended"), w.states.length - 1);
      assertOrdered(assert, w);
    }
  });

  test("drops frames a replay repeats (a replay that starts before the cursor)", async () => {
    const tether = new FakeTether(RECORD);
    tether.overlap = 4;
    const i = blocks(RECORD)[14].end;
    const { client } = setup({
      record: () => rec([RECORD_BYTES.subarray(0, i)], { end: "error" }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done;
    assert.deepEqual(reduce(w.events), golden("record").state);
    assert.equal(w.seqs.length, HEAD);
    assertOrdered(assert, w);
  });

  test("resumes with the replay of a real attach after a cursor (attach_cursor.sse)", async () => {
    const replay = fixtureText("attach_cursor.sse");
    const nine = blocks(RECORD).find((b) => b.frame?.seq === 9).end;
    const { client, calls } = setup({
      record: () => rec([RECORD_BYTES.subarray(0, nine)], { end: "error" }),
      attach: () => sse([replay]),
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done;
    assert.deepEqual(cursorOf(calls[1]), { run_id: RUN, after_seq: 9 });
    assert.deepEqual(reduce(w.events), golden("record").state);
    // The whole replay and its end came in one read: caught up (live), then ended.
    assert.deepEqual(w.states.slice(-4), ["reconnecting", "synchronizing", "live", "ended"]);
    assertOrdered(assert, w);
  });

  test("without a run id it attaches without a cursor and applies the snapshot", async () => {
    const tether = new FakeTether(RECORD);
    const { client, calls } = setup({
      // No x-tether-run-id header (a cross-origin answer that does not expose it), cut mid-frame.
      record: () => sse([RECORD_BYTES.subarray(0, 40)], { end: "error" }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done;
    assert.deepEqual(calls[1].body, { chat_id: "c1", protocol: 1 });
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("attaches with GET and Last-Event-ID when asked to", async () => {
    const tether = new FakeTether(RECORD);
    const i = blocks(RECORD)[8].end;
    const { client, calls } = setup({
      record: () => rec([RECORD_BYTES.subarray(0, i)], { end: "error" }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
      options: { attachMethod: "GET" },
    });
    const turn = client.send({ chat_id: "c 1" });
    const w = watch(turn);
    await turn.done;
    assert.equal(calls[1].method, "GET");
    assert.equal(calls[1].query.get("chat_id"), "c 1");
    assert.equal(calls[1].headers["last-event-id"], `${RUN}:${lastFrameBefore(RECORD, i).seq}`);
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("a stream that ends without STREAM_END is never done; five fruitless attempts fail recoverably", async () => {
    const noEnd = fixtureText("no_end.sse");
    for (const retry of ["network", "empty", "503"]) {
      const { client, calls } = setup({
        record: () => rec([noEnd]),
        attach: () => {
          if (retry === "network") throw new TypeError("Failed to fetch");
          if (retry === "503") return json(503, { error: "draining", message: "shutting down" });
          return sse([": keepalive\n\n"]); // a 200 that ends at once: no progress
        },
      });
      const turn = client.send({ chat_id: "c1" });
      const w = watch(turn);
      const err = await turn.done.then(
        () => assert.fail("done must not resolve"),
        (e) => e,
      );
      assert.ok(err instanceof TetherError);
      assert.equal(err.code, "retries_exhausted");
      assert.equal(err.recoverable, true);
      assert.deepEqual(err.cursor, { run_id: RUN, after_seq: 12 }, "the partial frame is not applied");
      assert.equal(calls.length, 1 + 5, retry);
      assert.equal(w.seqs.length, 12);
      assert.ok(!w.states.includes("ended"), String(w.states));
      assert.equal(w.states.at(-1), "failed");
      assert.equal(w.states.filter((s) => s === "reconnecting").length, 5);
    }
  });

  test("a reconnect that makes progress starts the attempt count again", async () => {
    // Every answer brings one more frame, then fails: many more than 5 drops, all with progress.
    const fs = blocks(RECORD).filter((b) => b.frame);
    let next = 0;
    const { client, calls } = setup({
      record: () => rec([fs[next++].text], { end: "error" }),
      attach: () => sse([fs[next++].text], { end: "error" }),
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    const end = await turn.done;
    assert.equal(end.persisted, true);
    assert.equal(calls.length, fs.length);
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("backs off exponentially from 500 ms to 5 s; five pauses add up to at least 10 s", () => {
    const lo = [0, 1, 2, 3, 4].map((n) => backoffDelay(n, { random: () => 0 }));
    const hi = [0, 1, 2, 3, 4, 9, 100].map((n) => backoffDelay(n, { random: () => 0.999999 }));
    assert.deepEqual(hi, [500, 1000, 2000, 4000, 5000, 5000, 5000]);
    assert.deepEqual(lo, [400, 800, 1600, 3200, 4000]);
    assert.ok(lo.reduce((a, b) => a + b) >= 10000);
  });

  test("reports each reconnect's attempt and pause", async () => {
    const { client } = setup({
      record: () => rec([fixtureText("no_end.sse")]),
      attach: () => {
        throw new TypeError("Failed to fetch");
      },
      options: { initialBackoffMs: 2, maxBackoffMs: 8, random: () => 0.999999 },
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done.catch(() => {});
    const pauses = w.log.filter((e) => e[0] === "state" && e[1] === "reconnecting").map((e) => [e[2].attempt, e[2].delay_ms]);
    assert.deepEqual(pauses, [
      [1, 2],
      [2, 4],
      [3, 8],
      [4, 8],
      [5, 8],
    ]);
  });

  test("a connection that goes silent past the idle timeout is resumed", async () => {
    const tether = new FakeTether(RECORD);
    const i = blocks(RECORD)[6].end;
    const { client, calls } = setup({
      record: (req) => rec([RECORD_BYTES.subarray(0, i)], { end: "hang", signal: req.signal }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
      options: { idleTimeoutMs: 30 },
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done;
    assert.equal(calls.length, 2);
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("a tab that becomes visible again re-attaches at once from the cursor", async () => {
    const tether = new FakeTether(RECORD);
    const doc = Object.assign(new EventTarget(), { visibilityState: "hidden" });
    const i = blocks(RECORD)[10].end;
    const { client, calls } = setup({
      record: (req) => rec([RECORD_BYTES.subarray(0, i)], { end: "hang", signal: req.signal }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
      options: { visibility: doc, staleMs: 0, initialBackoffMs: 60_000, maxBackoffMs: 60_000 },
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    while (w.seqs.length < lastFrameBefore(RECORD, i).seq) await new Promise((r) => setTimeout(r, 2));
    doc.dispatchEvent(new Event("visibilitychange")); // still hidden: nothing happens
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(calls.length, 1);
    doc.visibilityState = "visible";
    doc.dispatchEvent(new Event("visibilitychange"));
    const end = await turn.done; // a 60 s backoff would time the test out: the re-attach is immediate
    assert.equal(end.persisted, true);
    assert.deepEqual(cursorOf(calls[1]), { run_id: RUN, after_seq: lastFrameBefore(RECORD, i).seq });
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("the network coming back cuts a reconnect pause short", async () => {
    const tether = new FakeTether(RECORD);
    const win = new EventTarget();
    let online = false;
    const { client } = setup({
      record: () => rec([RECORD_BYTES.subarray(0, blocks(RECORD)[5].end)], { end: "error" }),
      attach: (req) => {
        if (!online) throw new TypeError("Failed to fetch");
        return sse([tether.answer(cursorOf(req))]);
      },
      options: { online: win, initialBackoffMs: 60_000, maxBackoffMs: 60_000 },
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    while (!w.states.includes("reconnecting")) await new Promise((r) => setTimeout(r, 2));
    online = true;
    win.dispatchEvent(new Event("online"));
    assert.equal((await turn.done).persisted, true);
  });
});

describe("snapshots", () => {
  test("an attach without a cursor: the snapshot replaces what is held, then the live tail", async () => {
    const text = fixtureText("attach_snapshot.sse");
    const { client, calls } = setup({ attach: () => sse([text]) });
    const turn = client.attach({ chat_id: "c2", wait_ms: 1000 });
    const w = watch(turn);
    w.events = [{ type: "TEXT_MESSAGE_CONTENT", messageId: "msg-1", delta: "stale text the app showed" }];
    const end = await turn.done;
    assert.deepEqual(calls[0].body, { chat_id: "c2", protocol: 1, wait_ms: 1000 });
    assert.equal(w.log[0][0], "state");
    assert.deepEqual(w.log[1].slice(0, 3), ["reset", frames(text)[0].run_id, frames(text)[0].seq]);
    assert.deepEqual(reduce(w.events), golden("attach_snapshot").state);
    assert.equal(end.persisted, true);
    assert.deepEqual(w.states, ["connecting", "synchronizing", "live", "ended"]);
    assertOrdered(assert, w);
  });

  test("a snapshot in the middle of a stream resets the state: its text is never shown twice", async () => {
    const text = fixtureText("snapshot_reset.sse");
    const bytes = Buffer.from(text);
    for (const i of [undefined, ...boundaries(text)]) {
      const { client } = setup({
        record: () => sse(i ? cut(bytes, [i]) : [text], { headers: { "x-tether-run-id": frames(text)[0].run_id } }),
      });
      const turn = client.send({ chat_id: "c3" });
      const w = watch(turn);
      await turn.done;
      const state = reduce(w.events);
      assert.deepEqual(state, golden("snapshot_reset").state);
      assert.equal(state.text["msg-1"], golden("record").state.text["msg-1"]);
      assertOrdered(assert, w);
    }
  });

  test("duplicated frames are applied once", async () => {
    const { client } = setup({ record: () => rec([fixtureText("duplicated.sse")]) });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    const end = await turn.done;
    assert.equal(end.persisted, true);
    assert.deepEqual(reduce(w.events), golden("record").state);
    assert.equal(w.seqs.length, HEAD);
    assertOrdered(assert, w);
  });

  test("a frame that skips a seq is not applied: the client resumes from its cursor", async () => {
    const fs = blocks(RECORD).filter((b) => b.frame);
    const gapped = fs.slice(0, 6).map((b) => b.text).join("") + fs[8].text;
    const tether = new FakeTether(RECORD);
    const { client, calls } = setup({
      record: () => rec([gapped], { end: "hang" }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
    });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    await turn.done;
    assert.deepEqual(cursorOf(calls[1]), { run_id: RUN, after_seq: 5 });
    assert.deepEqual(reduce(w.events), golden("record").state);
    assertOrdered(assert, w);
  });
});

describe("superseded runs", () => {
  const A = fixtureText("superseded.sse");
  const B = fixtureText("superseded_next.sse");
  const next = frames(A).at(-1).next_run_id;

  test("follow next_run_id, with a reset for the new run", async () => {
    const tether = new FakeTether(A, B);
    const { client, calls } = setup({
      record: () => sse([A], { headers: { "x-tether-run-id": frames(A)[0].run_id } }),
      attach: (req) => sse([tether.answer(cursorOf(req))]),
    });
    const turn = client.send({ chat_id: "s" });
    const w = watch(turn);
    const end = await turn.done;
    assert.equal(next, frames(B)[0].run_id);
    assert.deepEqual(cursorOf(calls[1]), { run_id: next, after_seq: 0 });
    assert.deepEqual(end, { ...golden("superseded_next").end, next_run_id: null, reason: null, run_id: next, seq: frames(B).at(-1).seq });
    assert.deepEqual(reduce(w.events), golden("superseded_next").state);
    const resets = w.log.filter((e) => e[0] === "reset");
    assert.deepEqual(resets.at(-1), ["reset", next, 0, 0]);
    assert.equal(turn.run_id, next);
    assert.ok(!w.states.slice(0, -1).includes("ended"));
    assertOrdered(assert, w);
  });

  test("followSuperseded: false ends with the superseded end", async () => {
    const { client, calls } = setup({
      record: () => sse([A]),
      options: { followSuperseded: false },
    });
    const turn = client.send({ chat_id: "s" });
    const w = watch(turn);
    const end = await turn.done;
    assert.equal(calls.length, 1);
    assert.equal(end.superseded, true);
    assert.equal(end.persisted, false);
    assert.equal(end.next_run_id, next);
    assert.equal(end.reason, "superseded");
    assert.deepEqual(reduce(w.events), golden("superseded").state);
  });
});

describe("stop, close, status and refusals", () => {
  test("stop() calls the stop route with the run; the cancelled end arrives through done", async () => {
    const text = fixtureText("cancelled.sse");
    const fs = blocks(text);
    const run = fs[0].frame.run_id;
    let release;
    const stopped = new Promise((r) => (release = r));
    const { client, calls } = setup({
      record: () => {
        const body = new ReadableStream({
          async start(c) {
            c.enqueue(new TextEncoder().encode(fs.slice(0, -1).map((b) => b.text).join("")));
            await stopped;
            c.enqueue(new TextEncoder().encode(fs.at(-1).text));
            c.close();
          },
        });
        return new Response(body, { headers: { "content-type": "text/event-stream", "x-tether-run-id": run } });
      },
      stop: () => {
        release();
        return json(200, { run_id: run, execution_stopped: true, terminal_persisted: false });
      },
    });
    const turn = client.send({ chat_id: "c4" });
    const w = watch(turn);
    const answer = await turn.stop();
    assert.deepEqual(answer, { run_id: run, execution_stopped: true, terminal_persisted: false });
    const stopReq = calls.find((c) => c.path.endsWith("/chat/stop"));
    assert.equal(stopReq.body.chat_id, "c4");
    assert.equal(stopReq.body.run_id, run);
    assert.equal(typeof stopReq.body.cancel_request_id, "string");
    const end = await turn.done;
    assert.deepEqual({ persisted: end.persisted, superseded: end.superseded, reason: end.reason }, golden("cancelled").end);
    assert.deepEqual(reduce(w.events), golden("cancelled").state);
    assert.equal(w.states.at(-1), "ended");
  });

  test("stop() retries a failed request with the same cancel_request_id", async () => {
    let n = 0;
    const { client, calls } = setup({
      stop: () => {
        if (n++ === 0) throw new TypeError("Failed to fetch");
        return json(202, { run_id: "r", execution_stopped: false, terminal_persisted: false });
      },
    });
    const answer = await client.stopRun("c5", "r");
    assert.equal(answer.execution_stopped, false);
    assert.equal(calls.length, 2);
    assert.equal(calls[0].body.cancel_request_id, calls[1].body.cancel_request_id);
  });

  test("an attach with nothing to attach to is idle and done is null", async () => {
    const { client } = setup({ attach: () => json(204) });
    const turn = client.attach({ chat_id: "none" });
    const w = watch(turn);
    assert.equal(await turn.done, null);
    assert.equal(turn.state, "idle");
    assert.deepEqual(w.states, ["connecting", "idle"]);
    assert.equal(await turn.stop(), null);
  });

  test("a refused record (409 turn_already_running) fails at once and is not retried", async () => {
    const { client, calls } = setup({
      record: () => json(409, { error: "turn_already_running", message: "busy", run_id: "x" }),
    });
    const turn = client.send({ chat_id: "c6" });
    const err = await turn.done.catch((e) => e);
    assert.equal(err.code, "turn_already_running");
    assert.equal(err.status, 409);
    assert.equal(err.recoverable, false);
    assert.equal(turn.state, "failed");
    assert.equal(calls.length, 1);
  });

  test("a record answered with something other than an event stream fails", async () => {
    const { client } = setup({ record: () => json(200, { reply: "not a stream" }) });
    const err = await client.send({ chat_id: "c6" }).done.catch((e) => e);
    assert.equal(err.code, "not_a_stream");
  });

  test("an attach refused with a 4xx is not retried; a 5xx is", async () => {
    const bad = setup({ attach: () => json(400, { error: "invalid_chat_id", message: "bad" }) });
    const err = await bad.client.attach({ chat_id: "\u0001" }).done.catch((e) => e);
    assert.equal(err.code, "invalid_chat_id");
    assert.equal(bad.calls.length, 1);

    let n = 0;
    const flaky = setup({
      attach: () => (n++ < 2 ? json(502, { error: "upstream_unreachable", message: "x" }) : sse([RECORD])),
    });
    const end = await flaky.client.attach({ chat_id: "c" }).done;
    assert.equal(end.persisted, true);
    assert.equal(flaky.calls.length, 3);
  });

  test("close() detaches: no callback after it, done resolves null", async () => {
    const i = blocks(RECORD)[8].end;
    const { client } = setup({
      record: (req) => rec([RECORD_BYTES.subarray(0, i), RECORD_BYTES.subarray(i)], { end: "hang", signal: req.signal }),
    });
    const turn = client.send({ chat_id: "c7" });
    const w = watch(turn);
    turn.onEvent((_e, { seq }) => {
      if (seq === 3) turn.close();
    });
    assert.equal(await turn.done, null);
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(w.seqs.at(-1), `${RUN}:3`);
  });

  test("status() returns the status route's JSON, or null for 204", async () => {
    const body = { run_id: "r", status: "running", seq: 7, persisted: false, superseded: false };
    const { client, calls } = setup({ status: (req) => (req.query.get("chat_id") === "c8" ? json(200, body) : json(204)) });
    assert.deepEqual(await client.status("c8"), body);
    assert.equal(await client.status("other"), null);
    assert.equal(calls[0].url, "http://tether.test/chat/run?chat_id=c8");
  });

  test("an unrecorded stream (tether's recorder full) passes events on and fails at its end", async () => {
    const upstream = frames(RECORD)
      .filter((f) => f.type === "STREAM_EVENT")
      .map((f) => `data: ${JSON.stringify(f.event)}\n\n`)
      .join("");
    const { client, calls } = setup({ record: () => sse([upstream]) });
    const turn = client.send({ chat_id: "c9" });
    const w = watch(turn);
    const err = await turn.done.catch((e) => e);
    assert.equal(err.code, "unrecorded");
    assert.equal(calls.length, 1);
    assert.deepEqual(reduce(w.events), golden("record").state);
  });

  test("a listener that throws does not break the stream", async () => {
    const { client } = setup({ record: () => rec([RECORD]) });
    const turn = client.send({ chat_id: "c1" });
    const w = watch(turn);
    let thrown = 0;
    const original = process.listeners("uncaughtException");
    process.removeAllListeners("uncaughtException");
    process.on("uncaughtException", () => thrown++);
    try {
      turn.onEvent(() => {
        throw new Error("app bug");
      });
      assert.equal((await turn.done).persisted, true);
      await new Promise((r) => setTimeout(r, 10));
    } finally {
      process.removeAllListeners("uncaughtException");
      original.forEach((l) => process.on("uncaughtException", l));
    }
    assert.equal(thrown, HEAD);
    assert.deepEqual(reduce(w.events), golden("record").state);
  });
});
