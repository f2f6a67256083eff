// An AI SDK chat backend as an application writes it, for the useChat browser test: `POST /api/chat`
// runs the SDK's own `streamText` on its own mock language model (`ai/test`, one slow turn of
// reasoning then text) and answers with the SDK's UI message stream
// (`pipeUIMessageStreamToResponse`); `GET /api/chats/{id}/messages` returns the chat's saved
// messages, which the page loads before it mounts `useChat`. The chat is saved in memory, as JSON
// (as a database would keep it): the request's messages when a turn starts, the SDK's finished list
// (the assistant message added) when its UI message stream ends, whole or cut. A request whose
// response is closed before its end aborts streamText (`abortSignal`), as an app's stop does. It
// counts what it saw per chat (turn requests, requests closed before their end, streamText's
// onAbort, the UI stream's onFinish), so the test asserts what reached the backend.
//
// Any major of the SDK from 5 on: `ai` is the imported `ai` package, `mock` its `ai/test`.

import http from "node:http";

/** The mock model's turn: this reasoning, then this text, one chunk every `chunkDelayMs`. */
export const REASONING = ["Let me ", "think ", "about ", "tether."];

/**
 * Starts the backend on 127.0.0.1:0. `deltas` are the text deltas of every turn, streamed by the
 * mock model one every `chunkDelayMs`. Resolves with its port, `fullText`, `stats(chatId)`
 * (`{ posts, aborted, streamAborted, saves }`), `saved(chatId)`, `settled(chatId)` (resolves once
 * the chat's last turn is over: saved, and if its request was aborted, streamText's abort seen) and
 * `close()`.
 */
export async function startAiSdkBackend({ ai, mock, deltas, chunkDelayMs }) {
  const chats = new Map(); // chat id -> saved UIMessage[], as JSON text
  const stats = new Map(); // chat id -> { posts, aborted, streamAborted, saves }
  const listeners = new Set(); // called after every change of a chat's stats
  const statOf = (id) => {
    if (!stats.has(id)) stats.set(id, { posts: 0, aborted: 0, streamAborted: 0, saves: 0 });
    return stats.get(id);
  };
  const count = (id, key) => {
    statOf(id)[key]++;
    for (const l of listeners) l();
  };
  const save = (id, messages) => chats.set(id, JSON.stringify(messages));

  const model = mockModel(ai, mock, deltas, chunkDelayMs);
  let ids = 0;

  async function chat(req, res) {
    const body = JSON.parse(await readBody(req));
    const id = body.id;
    count(id, "posts");
    // The chat as the request has it (the user message added), saved before the model runs.
    save(id, body.messages);
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) {
        count(id, "aborted");
        abort.abort();
      }
    });
    const result = ai.streamText({
      model,
      messages: await ai.convertToModelMessages(body.messages),
      abortSignal: abort.signal,
      onAbort: () => count(id, "streamAborted"),
    });
    // As the SDK's docs advise: run the model to its end even if the response is not read.
    result.consumeStream();
    result.pipeUIMessageStreamToResponse(res, {
      originalMessages: body.messages,
      generateMessageId: () => `asst-${id}-${++ids}`,
      sendReasoning: true,
      // On the stream's end, or when the response is closed early (the SDK cancels its reader).
      onFinish({ messages }) {
        save(id, messages);
        count(id, "saves");
      },
    });
  }

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://backend");
    try {
      if (req.method === "POST" && url.pathname === "/api/chat") return await chat(req, res);
      const m = /^\/api\/chats\/([^/]+)\/messages$/.exec(url.pathname);
      if (req.method === "GET" && m) {
        res.writeHead(200, { "content-type": "application/json", "cache-control": "no-store" });
        return res.end(chats.get(decodeURIComponent(m[1])) ?? "[]");
      }
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "not_found", method: req.method, path: url.pathname }));
    } catch (e) {
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end(String(e?.stack ?? e));
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: server.address().port,
    fullText: deltas.join(""),
    stats: (id) => structuredClone(statOf(id)),
    saved: (id) => JSON.parse(chats.get(id) ?? "[]"),
    settled(id, timeoutMs = 20_000) {
      const done = () => {
        const s = statOf(id);
        return s.saves >= s.posts && s.streamAborted >= s.aborted;
      };
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!done()) return;
          listeners.delete(check);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`chat ${id} did not settle: ${JSON.stringify(statOf(id))}`));
        }, timeoutMs);
        listeners.add(check);
        check();
      });
    },
    close() {
      server.closeAllConnections();
      return new Promise((r) => server.close(r));
    },
  };
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

/**
 * The SDK's mock language model streaming one turn, paced by the SDK's simulateReadableStream:
 * `MockLanguageModelV4` (ai 7's provider spec), `V3` (ai 6's, the same stream parts) or `V2`
 * (ai 5's, whose finish part has flat usage and a string finish reason).
 */
function mockModel(ai, mock, deltas, chunkDelayMs) {
  const Model = mock.MockLanguageModelV4 ?? mock.MockLanguageModelV3 ?? mock.MockLanguageModelV2;
  const structured = Model !== mock.MockLanguageModelV2;
  const finish = structured
    ? {
        type: "finish",
        finishReason: { unified: "stop", raw: "stop" },
        usage: {
          inputTokens: { total: 5, noCache: 5, cacheRead: 0, cacheWrite: 0 },
          outputTokens: { total: deltas.length, text: deltas.length, reasoning: REASONING.length },
        },
      }
    : {
        type: "finish",
        finishReason: "stop",
        usage: { inputTokens: 5, outputTokens: deltas.length, totalTokens: 5 + deltas.length },
      };
  const chunks = () => [
    { type: "stream-start", warnings: [] },
    { type: "reasoning-start", id: "r1" },
    ...REASONING.map((delta) => ({ type: "reasoning-delta", id: "r1", delta })),
    { type: "reasoning-end", id: "r1" },
    { type: "text-start", id: "t1" },
    ...deltas.map((delta) => ({ type: "text-delta", id: "t1", delta })),
    { type: "text-end", id: "t1" },
    finish,
  ];
  return new Model({
    doStream: async () => ({
      stream: ai.simulateReadableStream({ chunks: chunks(), chunkDelayInMs: chunkDelayMs }),
    }),
  });
}
