// The AI SDK (`ai` npm: 7, and 5 as the alias `ai-v5`) resumes through tether's
// conf/profiles/ai-sdk.toml: a scripted backend that only serves `POST /api/chat` (a UI message
// stream), a turn cut mid-stream, then the SDK's own DefaultChatTransport.reconnectToStream (what
// `useChat({resume: true})` calls on mount) and readUIMessageStream build the assistant message:
// its text must be the backend's text, once. Also what the SDK sees when there is nothing to
// resume: a completed chat and an unknown one. usechat.test.mjs drives `useChat` itself in Chromium.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import * as ai7 from "ai";
import * as ai5 from "ai-v5";

import { cutPoint, relay, startBackend, startTether, words, writePaced } from "./support.mjs";

const DELTAS = words(40, 7);
const FULL_TEXT = DELTAS.join("");
const REASONING = ["Let me ", "think."];

/** The backend's UI message stream for one turn: start, reasoning, text deltas, finish, [DONE]. */
function turnFrames(messageId) {
  const chunks = [
    { type: "start", messageId },
    { type: "start-step" },
    { type: "reasoning-start", id: "r1" },
    ...REASONING.map((delta) => ({ type: "reasoning-delta", id: "r1", delta })),
    { type: "reasoning-end", id: "r1" },
    { type: "text-start", id: "t1" },
    ...DELTAS.map((delta) => ({ type: "text-delta", id: "t1", delta })),
    { type: "text-end", id: "t1" },
    { type: "finish-step" },
    { type: "finish" },
  ];
  return [...chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`), "data: [DONE]\n\n"];
}

let backend;
let tether;
let net;
const turnsDone = [];

before(async () => {
  backend = await startBackend(async (req, res, url, body) => {
    if (req.method !== "POST" || url.pathname !== "/api/chat") return false;
    assert.equal(typeof body?.id, "string", "the SDK sends the chat id as `id`");
    const headers = {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "x-vercel-ai-ui-message-stream": "v1",
    };
    const done = writePaced(res, 200, headers, turnFrames(`msg-${body.id}`), 20);
    turnsDone.push(done);
    await done;
    return true;
  });
  tether = await startTether("ai-sdk", backend.port);
  net = await relay(Number(new URL(tether.url).port));
});

after(async () => {
  await net?.close();
  await tether?.stop();
  await backend?.close();
});

const userMessage = { id: "u1", role: "user", parts: [{ type: "text", text: "Tell me about tether." }] };

/** The last message `ai`'s readUIMessageStream builds from `stream`, and the chunk types it read. */
async function buildMessage(ai, stream) {
  const types = [];
  const counted = stream.pipeThrough(
    new TransformStream({
      transform(chunk, c) {
        types.push(chunk.type);
        c.enqueue(chunk);
      },
    }),
  );
  let message;
  for await (const m of ai.readUIMessageStream({ stream: counted })) message = m;
  return { message, types };
}

const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

for (const [name, ai] of [["ai 7", ai7], ["ai 5", ai5]]) {
  test(`${name}: a turn cut mid-stream is resumed by reconnectToStream: the whole text, exactly once`, async () => {
    const chatId = `chat-${name.replace(" ", "")}-1`;
    const postsBefore = backend.requests.length;
    const live = new ai.DefaultChatTransport({ api: `${net.url}/api/chat` });
    const stream = await live.sendMessages({
      chatId,
      messages: [userMessage],
      trigger: "submit-message",
      messageId: undefined,
      abortSignal: new AbortController().signal,
    });
    const cutAfter = cutPoint(8, 40, name);
    const reader = stream.getReader();
    const before = [];
    while (before.length < cutAfter) {
      const { value, done } = await reader.read();
      assert.ok(!done, "the turn ended before the cut");
      before.push(value);
    }
    assert.ok(net.cut() >= 1, "the relay had the turn's connection open");
    await reader.cancel().catch(() => {});

    // What useChat({resume: true}) does on mount, straight to tether.
    const resumer = new ai.DefaultChatTransport({ api: `${tether.url}/api/chat` });
    const resumed = await resumer.reconnectToStream({ chatId });
    assert.ok(resumed, "the chat's run is active, so there is a stream to resume (not 204)");
    const { message, types } = await buildMessage(ai, resumed);
    assert.equal(textOf(message), FULL_TEXT, "the resumed message's text is the backend's, exactly once");
    assert.equal(
      message.parts.filter((p) => p.type === "reasoning").map((p) => p.text).join(""),
      REASONING.join(""),
    );
    assert.equal(message.id, `msg-${chatId}`, "the message id is the backend's");
    assert.equal(types.filter((t) => t === "start").length, 1);
    assert.equal(types.at(-1), "finish", "the replay ends with the backend's finish chunk");

    await Promise.all(turnsDone);
    assert.deepEqual(
      backend.requests.slice(postsBefore).filter((r) => r.startsWith("POST")),
      ["POST /api/chat"],
      "the backend saw the one turn and no resume",
    );
    assert.deepEqual(
      backend.requests.filter((r) => !r.startsWith("POST")),
      [],
      "no GET reached the backend",
    );

    // The turn is over: reconnecting now is 204, which the SDK reports as null.
    assert.equal(await resumer.reconnectToStream({ chatId }), null);
  });

  test(`${name}: nothing to resume: an unknown chat is 204, which the SDK reports as null`, async () => {
    const resumer = new ai.DefaultChatTransport({ api: `${tether.url}/api/chat` });
    assert.equal(await resumer.reconnectToStream({ chatId: "chat-that-never-ran" }), null);
    assert.ok(!backend.requests.some((r) => r.includes("chat-that-never-ran")), "tether answered it");
  });
}
