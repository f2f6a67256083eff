// Accounting with the OpenAI SDK (`openai` npm): a Chat Completions stream asked with
// `stream_options: {include_usage: true}` goes through tether's record route to a scripted
// OpenAI-compatible backend that ends its turn with the usage chunk. The client's connection is
// cut mid-turn; tether reads the turn to its end anyway, and its status route then answers the
// provider's own numbers (`usage`) and who watched the run (`watch`: nobody at the end).

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

import OpenAI from "openai";

import { cutPoint, relay, startBackend, startTether, words, writePaced } from "./support.mjs";

const DELTAS = words(40, 7);
const USAGE = {
  prompt_tokens: 17,
  completion_tokens: DELTAS.length,
  total_tokens: 17 + DELTAS.length,
  prompt_tokens_details: { cached_tokens: 4 },
  completion_tokens_details: { reasoning_tokens: 0 },
};

const CONFIG = `
[[routes]]
methods = ["POST"]
path = "/v1/chat/completions"
kind = "record"
chat_id = "header:X-Chat-Id"
format = "openai_chat"

[[routes]]
methods = ["GET"]
path = "/chat/run"
kind = "status"
chat_id = "query:chat_id"
`;

/** The chunks of one streamed completion, the usage chunk last (as `include_usage` asks). */
function chunks() {
  const base = { id: "chatcmpl-usage1", object: "chat.completion.chunk", created: 1760000000, model: "gpt-test" };
  const choice = (delta, finish_reason = null) => ({ ...base, choices: [{ index: 0, delta, finish_reason }], usage: null });
  return [
    choice({ role: "assistant", content: "" }),
    ...DELTAS.map((content) => choice({ content })),
    choice({}, "stop"),
    { ...base, choices: [], usage: USAGE },
  ];
}

let backend;
let tether;
let net;
let dir;
let served; // the backend's turn, resolved once written to its end

before(async () => {
  backend = await startBackend(async (req, res, url, body) => {
    if (req.method !== "POST" || url.pathname !== "/v1/chat/completions") return false;
    assert.deepEqual(body?.stream_options, { include_usage: true });
    const frames = [...chunks().map((c) => `data: ${JSON.stringify(c)}\n\n`), "data: [DONE]\n\n"];
    served = writePaced(res, 200, { "content-type": "text/event-stream" }, frames, 20);
    await served;
    return true;
  });
  dir = mkdtempSync(path.join(os.tmpdir(), "tether-usage-"));
  const config = path.join(dir, "usage.toml");
  writeFileSync(config, CONFIG);
  tether = await startTether(config, backend.port);
  net = await relay(Number(new URL(tether.url).port));
});

after(async () => {
  await net?.close();
  await tether?.stop();
  await backend?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function status(chatId) {
  const r = await fetch(`${tether.url}/chat/run?chat_id=${chatId}`);
  assert.equal(r.status, 200);
  return r.json();
}

test("a turn cut mid-stream still reports the provider's usage on the status route", async () => {
  const cutAfter = cutPoint(5, 30, "usage");
  const client = new OpenAI({
    baseURL: `${net.url}/v1`,
    apiKey: "sk-test",
    maxRetries: 0,
    defaultHeaders: { "x-chat-id": "usage-1" },
  });
  const stream = await client.chat.completions.create({
    model: "gpt-test",
    messages: [{ role: "user", content: "Count the tokens." }],
    stream: true,
    stream_options: { include_usage: true },
  });
  const got = [];
  await assert.rejects(async () => {
    for await (const c of stream) {
      got.push(c);
      if (got.length === cutAfter) assert.ok(net.cut() >= 1, "the relay had the stream open");
    }
  }, "the cut breaks the SDK's stream");
  assert.ok(got.length < DELTAS.length, `cut mid-turn after ${got.length} chunks`);
  assert.ok(got.every((c) => c.usage == null), "the client never saw the usage chunk");

  await served;
  let s = await status("usage-1");
  for (let i = 0; s.status !== "completed" && i < 200; i++) {
    await new Promise((r) => setTimeout(r, 25));
    s = await status("usage-1");
  }
  assert.equal(s.status, "completed");
  assert.deepEqual(s.usage, {
    input_tokens: 17,
    output_tokens: DELTAS.length,
    cached_input_tokens: 4,
    reasoning_tokens: 0,
    model: "gpt-test",
  });
  assert.equal(s.watch.ended_watched, false, "nobody was attached at the end");
  assert.ok(s.watch.events_unwatched > 0, "events went unread after the cut");
  assert.ok(s.watch.unwatched_ms > 0);
});
