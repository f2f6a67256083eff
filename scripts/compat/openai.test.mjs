// The OpenAI SDK (`openai` npm) resumes a background response through tether's
// conf/profiles/openai-responses.toml. The scripted backend serves only `POST /v1/responses` (a
// Responses stream: `event: <type>` + `data: {"type","sequence_number",…}`); the turn is cut
// mid-stream, then client.responses.retrieve(id, {stream: true, starting_after: last}) resumes
// from tether's record. The events before and after the cut must be the backend's, each once.
// Also: retrieve without a cursor (everything), at the end (nothing), an unknown id (404), and
// a plain retrieve (no stream) passed through to the backend.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import OpenAI from "openai";

import { cutPoint, relay, startBackend, startTether, words, writePaced } from "./support.mjs";

const DELTAS = words(42, 5);

/** The Responses stream of one background response, as the API sends it. */
function responseEvents(id) {
  const base = {
    id,
    object: "response",
    created_at: 1760000000,
    model: "gpt-test",
    background: true,
    output: [],
    error: null,
    incomplete_details: null,
    metadata: {},
  };
  const item = { id: `msg_${id.slice(5)}`, type: "message", role: "assistant", status: "in_progress", content: [] };
  const text = DELTAS.join("");
  const ev = [
    { type: "response.created", response: { ...base, status: "queued" } },
    { type: "response.in_progress", response: { ...base, status: "in_progress" } },
    { type: "response.output_item.added", output_index: 0, item },
    {
      type: "response.content_part.added",
      item_id: item.id,
      output_index: 0,
      content_index: 0,
      part: { type: "output_text", text: "", annotations: [] },
    },
    ...DELTAS.map((delta) => ({
      type: "response.output_text.delta",
      item_id: item.id,
      output_index: 0,
      content_index: 0,
      delta,
      logprobs: [],
    })),
    { type: "response.output_text.done", item_id: item.id, output_index: 0, content_index: 0, text, logprobs: [] },
    {
      type: "response.content_part.done",
      item_id: item.id,
      output_index: 0,
      content_index: 0,
      part: { type: "output_text", text, annotations: [] },
    },
  ];
  const done = { ...item, status: "completed", content: [{ type: "output_text", text, annotations: [] }] };
  ev.push({ type: "response.output_item.done", output_index: 0, item: done });
  ev.push({ type: "response.completed", response: { ...base, status: "completed", output: [done] } });
  return ev.map((e, i) => ({ ...e, sequence_number: i }));
}

let backend;
let tether;
let net;
let turn; // { id, events, done }

before(async () => {
  backend = await startBackend(async (req, res, url, body) => {
    if (req.method !== "POST" || url.pathname !== "/v1/responses") return false;
    assert.equal(body?.stream, true);
    assert.equal(body?.background, true);
    const id = `resp_68c0${String(backend.requests.length).padStart(4, "0")}ab12cd34ef56`;
    const events = responseEvents(id);
    const frames = events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
    const done = writePaced(res, 200, { "content-type": "text/event-stream; charset=utf-8" }, frames, 20);
    turn = { id, events, done };
    await done;
    return true;
  });
  tether = await startTether("openai-responses", backend.port);
  net = await relay(Number(new URL(tether.url).port));
});

after(async () => {
  await net?.close();
  await tether?.stop();
  await backend?.close();
});

const sdk = (base) => new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-test", maxRetries: 0 });

async function collect(stream) {
  const out = [];
  for await (const e of stream) out.push(e);
  return out;
}

test("a background response cut mid-stream resumes with retrieve(starting_after): each event once", async () => {
  const cutAfter = cutPoint(5, 40, "openai");
  const stream = await sdk(net.url).responses.create({
    model: "gpt-test",
    input: "Tell me about tether.",
    stream: true,
    background: true,
  });
  const got = [];
  await assert.rejects(async () => {
    for await (const e of stream) {
      got.push(e);
      if (got.length === cutAfter) assert.ok(net.cut() >= 1, "the relay had the stream open");
    }
  }, "the cut breaks the SDK's stream");
  assert.ok(got.length >= cutAfter && got.length < turn.events.length, `cut mid-turn after ${got.length} events`);
  const id = got[0].response.id;
  assert.equal(id, turn.id, "the id from response.created");

  const last = got.at(-1).sequence_number;
  const rest = await collect(await sdk(tether.url).responses.retrieve(id, { stream: true, starting_after: last }));
  const all = [...got, ...rest];
  assert.deepEqual(all, turn.events, "the backend's events, each once, in order");
  assert.equal(new Set(all.map((e) => e.sequence_number)).size, all.length, "no sequence number twice");
  assert.equal(all.at(-1).type, "response.completed");
  assert.deepEqual(backend.requests, ["POST /v1/responses"], "the resume never reached the backend");
});

test("after the response: no cursor replays it all, the last cursor is empty, unknown id 404", async () => {
  await turn.done;
  const client = sdk(tether.url);
  assert.deepEqual(await collect(await client.responses.retrieve(turn.id, { stream: true })), turn.events);
  const lastSeq = turn.events.at(-1).sequence_number;
  assert.deepEqual(
    await collect(await client.responses.retrieve(turn.id, { stream: true, starting_after: lastSeq })),
    [],
    "nothing after the last sequence number: an empty stream",
  );
  assert.deepEqual(
    await collect(await client.responses.retrieve(turn.id, { stream: true, starting_after: lastSeq - 3 })),
    turn.events.slice(-3),
  );
  await assert.rejects(
    async () => collect(await client.responses.retrieve("resp_unknown000000", { stream: true })),
    (e) => e instanceof OpenAI.NotFoundError,
    "an unknown response id: 404",
  );
  assert.ok(!backend.requests.some((r) => r.includes("resp_unknown")), "tether answered the unknown id itself");

  // A plain retrieve is not a resume (only_if stream=true): it goes to the backend unchanged.
  await assert.rejects(client.responses.retrieve(turn.id), (e) => e instanceof OpenAI.NotFoundError);
  assert.equal(backend.requests.at(-1), `GET /v1/responses/${turn.id}`);
});
