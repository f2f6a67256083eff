// The profiles whose clients have no library to drive (igraph-v2, preview-agents, workflows,
// native), checked with the requests those clients send, as their own documents describe them:
// a turn read partway and dropped, then that client's resume or recovery request; its cancel and
// status in its own shape; and what it gets for an unknown run. Each profile runs the real binary
// in front of a scripted backend that serves the turn (and the cancel, where the profile forwards
// it) and answers 404 to anything else. Every profile file must also load.

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { REPO, cutPoint, startBackend, startTether, words, writePaced } from "./support.mjs";

/** Splits an SSE body into its frames (each with its closing blank line); comments left out. */
function framesOf(text) {
  return text
    .split(/(?<=\n\n)/)
    .filter((f) => f.trim() && !f.split("\n").every((l) => l === "" || l.startsWith(":")));
}

/** Reads `res` until it holds `n` frames, then drops the connection; returns those frames. */
async function readThenDrop(res, n, controller) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = "";
  while (framesOf(text).length < n || !text.endsWith("\n\n")) {
    const { value, done } = await reader.read();
    assert.ok(!done, `the stream ended before ${n} frames: ${text}`);
    text += dec.decode(value, { stream: true });
  }
  controller.abort();
  return framesOf(text).slice(0, n);
}

const dataOf = (frame) => JSON.parse(/^data: (.*)$/m.exec(frame)[1]);

/** Runs `fn({backend, tether})` with the profile in front of a backend served by `handler`. */
async function withProfile(profile, handler, fn) {
  const backend = await startBackend(handler);
  const tether = await startTether(profile, backend.port);
  try {
    await fn({ backend, tether });
  } finally {
    await tether.stop();
    await backend.close();
  }
}

test("every profile in conf/profiles loads", async () => {
  const names = readdirSync(path.join(REPO, "conf/profiles")).filter((f) => f.endsWith(".toml"));
  assert.deepEqual(names.sort(), [
    "ai-sdk.toml", "durable-streams.toml", "eventsource.toml", "igraph-v2.toml", "langgraph.toml", "native.toml",
    "openai-responses.toml", "preview-agents.toml", "workflows.toml",
  ]);
  for (const name of names) {
    const t = await startTether(name.replace(/\.toml$/, ""), 9);
    await t.stop();
  }
});

// ---- igraph-v2 -------------------------------------------------------------------------------

/** An SSE v2 turn: frames with event_index 0.., and observation frames (event_index null). */
function igraphFrames(sessionId, runId) {
  const out = [];
  let index = 0;
  for (const [i, w] of words(36, 13).entries()) {
    const events = [{ type: "text_delta", delta: w }];
    out.push({ protocol_version: 2, session_id: sessionId, run_id: runId, event_index: index++, events });
    if (i % 6 === 5) {
      const progress = { type: "tool_progress", tool: "train", call_id: "job-1", progress: { epoch: i, epochs: 36 } };
      out.push({ protocol_version: 2, session_id: sessionId, run_id: runId, event_index: null, events: [progress] });
    }
  }
  out.push({ protocol_version: 2, session_id: sessionId, run_id: runId, event_index: index, events: [{ type: "done" }] });
  return out.map((d) => `data: ${JSON.stringify(d)}\n\n`);
}

test("igraph-v2: resume by last_event_index, by start_request_id, cancel and control in its shape", async () => {
  const turns = new Map(); // start_request_id -> {runId, frames, done}
  let cancelArrived;
  const cancelForwarded = new Promise((r) => (cancelArrived = r));
  const handler = async (req, res, url, body) => {
    const chat = /^\/api\/sessions\/([^/]+)\/chat$/.exec(url.pathname);
    if (req.method === "POST" && chat) {
      assert.equal(req.headers["x-igraph-stream-version"], "2");
      const runId = `4d227ea8-c8ca-4f0d-b5e4-81a44de7b${String(turns.size).padStart(3, "0")}`;
      const frames = igraphFrames(chat[1], runId);
      const done = writePaced(res, 200, { "content-type": "text/event-stream" }, frames, 20);
      turns.set(body.start_request_id, { runId, frames, done });
      await done;
      return true;
    }
    if (req.method === "POST" && /^\/api\/sessions\/[^/]+\/runs\/cancel$/.test(url.pathname)) {
      res.writeHead(202, { "content-type": "application/json" });
      res.end(JSON.stringify({ accepted: true }));
      cancelArrived(body);
      return true;
    }
    return false;
  };
  await withProfile("igraph-v2", handler, async ({ backend, tether }) => {
    const sid = "0b6f3a2e-5d4c-4b8a-9e1f-2a3b4c5d6e7f";
    const startRequestId = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
    const v2 = { "x-igraph-stream-version": "2", "content-type": "application/json", "accept-language": "en" };
    const ac = new AbortController();
    const res = await fetch(`${tether.url}/api/sessions/${sid}/chat`, {
      method: "POST",
      headers: v2,
      body: JSON.stringify({ message: "train it", start_request_id: startRequestId, attachments: null, output_format: "chat" }),
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    const got = await readThenDrop(res, cutPoint(4, 30, "igraph-v2"), ac);
    const { runId, frames, done } = turns.get(startRequestId);
    assert.deepEqual(got, frames.slice(0, got.length));

    // Same-page resume from the last applied event_index (observation frames do not advance it).
    const applied = got.map(dataOf).filter((d) => d.event_index !== null).at(-1).event_index;
    const after = frames.findIndex((f) => dataOf(f).event_index === applied) + 1;
    const resumed = await fetch(`${tether.url}/api/sessions/${sid}/runs/${runId}/resume?last_event_index=${applied}`, {
      method: "POST",
      headers: { "x-igraph-stream-version": "2" },
    });
    assert.equal(resumed.status, 200);
    assert.match(resumed.headers.get("content-type"), /^text\/event-stream/);
    assert.deepEqual(framesOf(await resumed.text()), frames.slice(after), "the backend's frames after the cursor, byte for byte");
    await done;

    // After a refresh: the whole run from -1, named by the client's start_request_id, over GET.
    const full = await fetch(`${tether.url}/api/sessions/${sid}/runs/${startRequestId}/resume?last_event_index=-1`, { headers: v2 });
    assert.equal(full.status, 200);
    assert.deepEqual(framesOf(await full.text()), frames);

    const unknown = await fetch(`${tether.url}/api/sessions/${sid}/runs/00000000-0000-4000-8000-000000000000/resume?last_event_index=3`, {
      method: "POST",
      headers: v2,
    });
    assert.equal(unknown.status, 404, "an unknown run");

    const control = await fetch(`${tether.url}/api/sessions/${sid}/runs/control?run_id=${runId}`, { headers: v2 });
    assert.equal(control.status, 200);
    const status = await control.json();
    assert.deepEqual(Object.keys(status).sort(), ["can_send", "execution_stopped", "run_id", "status", "terminal_persisted"]);
    assert.equal(status.run_id, runId);
    // The run ended cleanly; the profile's commit = "clean_end" counts that as the save.
    assert.equal(status.status, "completed", JSON.stringify(status));
    assert.equal(status.terminal_persisted, true);
    assert.equal(status.execution_stopped, true);
    assert.equal(status.can_send, true);

    // Cancel a second, running turn by its start_request_id; a retry with the same
    // cancel_request_id gets the same answer.
    const second = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    const ac2 = new AbortController();
    const res2 = await fetch(`${tether.url}/api/sessions/${sid}/chat`, {
      method: "POST",
      headers: v2,
      body: JSON.stringify({ message: "again", start_request_id: second }),
      signal: ac2.signal,
    });
    await readThenDrop(res2, 3, ac2);
    const cancelBody = { target: { start_request_id: second }, cancel_request_id: "f186c422-5eed-4d0c-a4b9-e7d459124fd0" };
    const cancel = () => fetch(`${tether.url}/api/sessions/${sid}/runs/cancel`, { method: "POST", headers: v2, body: JSON.stringify(cancelBody) });
    const c1 = await cancel();
    assert.ok([200, 202].includes(c1.status), `cancel: ${c1.status}`);
    const a1 = await c1.json();
    assert.equal(a1.run_id, second, "run_id is the id the client named");
    assert.equal(typeof a1.execution_stopped, "boolean");
    assert.equal(typeof a1.terminal_persisted, "boolean");
    const a2 = await (await cancel()).json();
    assert.equal(a2.run_id, second, "a retried cancel names the same run");
    // The forward is detached from the answer: wait for the backend to get it.
    assert.deepEqual(await cancelForwarded, cancelBody, "the cancel is forwarded to the backend as sent");
    assert.equal(backend.requests.filter((r) => r.includes("/resume") || r.includes("/control")).length, 0, "resume and control were tether's");
  });
});

// ---- preview-agents --------------------------------------------------------------------------

test("preview-agents: one turn per thread, protocol-1 recovery, DELETE stop by executionId", async () => {
  let n = 0;
  let deleteArrived;
  const deleteForwarded = new Promise((r) => (deleteArrived = r));
  const handler = async (req, res, url) => {
    if (req.method === "POST" && /^\/projects\/[^/]+\/agents\/v2\/[^/]+\/chat\/[^/]+$/.test(url.pathname)) {
      const executionId = `exec_${++n}`;
      const frames = [
        { type: "execution-started", executionId, sessionId: "sess_1" },
        ...words(40, 17).map((w) => ({ type: "text-delta", delta: w })),
        { type: "finish" },
      ].map((e) => `data: ${JSON.stringify(e)}\n\n`);
      await writePaced(res, 200, { "content-type": "text/event-stream" }, frames, 25);
      return true;
    }
    if (req.method === "DELETE" && /\/executions\/[^/]+$/.test(url.pathname)) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ cancelRequested: true }));
      deleteArrived(url.pathname);
      return true;
    }
    return false;
  };
  await withProfile("preview-agents", handler, async ({ backend, tether }) => {
    const chat = `${tether.url}/projects/p1/agents/v2/a1/chat/thread-7`;
    const ac = new AbortController();
    const res = await fetch(chat, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ message: "hi" }), signal: ac.signal });
    assert.equal(res.status, 200);
    const got = await readThenDrop(res, 5, ac);
    assert.equal(dataOf(got[0]).executionId, "exec_1");

    const busy = await fetch(chat, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ message: "second" }) });
    assert.equal(busy.status, 409);
    assert.equal((await busy.json()).error, "turn_already_running");
    assert.equal(backend.requests.filter((r) => r.startsWith("POST")).length, 1, "the competing turn never reached the backend");

    // A reloaded page recovers with protocol 1: snapshot, live tail.
    const ac2 = new AbortController();
    const live = await fetch(`${chat}/live`, { signal: ac2.signal });
    assert.equal(live.status, 200);
    const first = await readThenDrop(live, 1, ac2);
    assert.equal(dataOf(first[0]).type, "STREAM_SNAPSHOT");

    // A late stop naming another execution stops nothing; the client's own stop does.
    const stale = await fetch(`${chat}/executions/exec_0`, { method: "DELETE" });
    assert.notEqual(stale.status, 200, "a stop for an execution that is not this run");
    const stop = await fetch(`${chat}/executions/exec_1`, { method: "DELETE" });
    assert.equal(stop.status, 200);
    assert.deepEqual(await stop.json(), { cancelRequested: true });
    assert.equal(await deleteForwarded, "/projects/p1/agents/v2/a1/chat/thread-7/executions/exec_1", "forwarded");

    const after = await fetch(`${chat}/live`);
    assert.equal(after.status, 200, "a stopped run is not persisted: snapshot + STREAM_END");
    const frames = framesOf(await after.text()).map(dataOf);
    assert.equal(frames.at(-1).type, "STREAM_END");
    assert.equal(frames.at(-1).persisted, false);
    assert.equal(frames.at(-1).reason, "cancelled");
  });
});

// ---- workflows -------------------------------------------------------------------------------

/** An Anthropic Messages stream. */
function anthropicFrames() {
  const ev = [
    { type: "message_start", message: { id: "msg_01", type: "message", role: "assistant", model: "claude-test", content: [], stop_reason: null, usage: { input_tokens: 12, output_tokens: 1 } } },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    { type: "ping" },
    ...words(40, 19).map((text) => ({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text } })),
    { type: "content_block_stop", index: 0 },
    { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 41 } },
    { type: "message_stop" },
  ];
  return ev.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
}

test("workflows: run id and token headers, re-attach by startIndex, token checked", async () => {
  const frames = anthropicFrames();
  let done;
  const handler = async (req, res, url) => {
    if (req.method !== "POST" || url.pathname !== "/api/claude/chat") return false;
    done = writePaced(res, 200, { "content-type": "text/event-stream" }, frames, 20);
    await done;
    return true;
  };
  await withProfile("workflows", handler, async ({ backend, tether }) => {
    const ac = new AbortController();
    const res = await fetch(`${tether.url}/api/claude/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sessionId: "sess-wf-1", message: "hi" }),
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    const runId = res.headers.get("x-workflow-run-id");
    const token = res.headers.get("x-resume-token");
    assert.ok(runId, "the run id header");
    assert.match(token ?? "", /^\d+\.[A-Za-z0-9_-]+$/, "the token: <expiry>.<base64url mac>");
    const got = await readThenDrop(res, cutPoint(3, 35, "workflows"), ac);
    assert.deepEqual(got, frames.slice(0, got.length));

    const stream = (startIndex, tok) =>
      fetch(`${tether.url}/api/claude/stream?runId=${encodeURIComponent(runId)}&startIndex=${startIndex}`, {
        headers: tok === undefined ? {} : { "x-resume-token": tok },
      });
    const resumed = await stream(got.length, token);
    assert.equal(resumed.status, 200);
    assert.ok(resumed.headers.get("x-resume-token"), "a fresh token on the re-attach");
    assert.deepEqual(framesOf(await resumed.text()), frames.slice(got.length), "frame N onward, byte for byte");
    await done;

    const atEnd = await stream(frames.length, token);
    assert.equal(atEnd.status, 200);
    assert.equal(await atEnd.text(), "", "at the end of a completed run: empty, and it ends");
    assert.equal((await stream(0)).status, 404, "no token");
    assert.equal((await stream(0, `${token.split(".")[0]}.AAAA`)).status, 404, "a wrong token");
    const other = await fetch(`${tether.url}/api/claude/stream?runId=no-such-run&startIndex=0`, { headers: { "x-resume-token": token } });
    assert.equal(other.status, 404, "a token for another run");
    assert.deepEqual(backend.requests, ["POST /api/claude/chat"]);
  });
});

// ---- native ----------------------------------------------------------------------------------

test("native: an AG-UI turn dropped mid-way is recovered at /chat/live", async () => {
  const handler = async (req, res, url, body) => {
    if (req.method !== "POST" || url.pathname !== "/chat") return false;
    const ev = [
      { type: "RUN_STARTED", threadId: body.chat_id, runId: "r1" },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      ...words(30, 23).map((delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta })),
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "RUN_FINISHED", threadId: body.chat_id, runId: "r1" },
    ];
    await writePaced(res, 200, { "content-type": "text/event-stream" }, ev.map((e) => `data: ${JSON.stringify(e)}\n\n`), 20);
    return true;
  };
  await withProfile("native", handler, async ({ tether }) => {
    const ac = new AbortController();
    const res = await fetch(`${tether.url}/chat`, { method: "POST", body: JSON.stringify({ chat_id: "n1", protocol: 1 }), signal: ac.signal });
    await readThenDrop(res, 4, ac);
    const live = await fetch(`${tether.url}/chat/live`, { method: "POST", body: JSON.stringify({ chat_id: "n1", protocol: 1 }) });
    assert.equal(live.status, 200);
    const frames = framesOf(await live.text()).map(dataOf);
    assert.equal(frames[0].type, "STREAM_SNAPSHOT");
    const text = [...frames[0].events, ...frames.filter((f) => f.type === "STREAM_EVENT").map((f) => f.event)]
      .filter((e) => e?.type === "TEXT_MESSAGE_CONTENT")
      .map((e) => e.delta)
      .join("");
    assert.equal(text, words(30, 23).join(""));
    assert.deepEqual(frames.at(-1).type, "STREAM_END");
    assert.equal(frames.at(-1).persisted, true);
  });
});
