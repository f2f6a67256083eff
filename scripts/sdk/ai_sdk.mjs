// SDK agreement for the AI SDK UI message stream: runs the official `ai` package's own parser
// and accumulator over every tests/fixtures/ai_sdk/*.sse and compares what it builds with the
// golden <name>.json that tether's tests reduce the same fixture to.
//
// Per fixture: the bytes up to `data: [DONE]` go through `parseJsonEventStream` with
// `uiMessageChunkSchema` (as the SDK's chat transport reads a response; a chunk that fails the
// schema fails the fixture), the chunk objects through `readUIMessageStream`, and the last
// UIMessage it yields is projected onto the golden's `message` ({id, metadata, parts}; keys whose
// value is undefined dropped). Errors the accumulator reports (`error` chunks) are compared with
// the golden's `errors`. A golden tool part's `inputText` (the concatenated `inputTextDelta`s) is
// compared with the last `rawInput` the SDK showed while that tool's input was streaming. The
// golden's `finishReason`, `aborted`, `done` and `others` are tether-side only:
// readUIMessageStream does not expose them.
//
// Setup: cd scripts/sdk && npm ci        Run: node scripts/sdk/ai_sdk.mjs
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import {
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from 'ai';

const here = dirname(fileURLToPath(import.meta.url));
const dir = join(here, '../../tests/fixtures/ai_sdk');

/** JSON round trip: drops undefined members, as the golden never has them. */
const plain = v => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

/** The fixture's bytes up to and including its `data: [DONE]` block. */
function untilDone(text) {
  const at = text.indexOf('data: [DONE]\n\n');
  if (at < 0) throw new Error('no data: [DONE] block');
  return text.slice(0, at + 'data: [DONE]\n\n'.length);
}

function byteStream(text) {
  const bytes = new TextEncoder().encode(text);
  return new ReadableStream({
    start(c) {
      // Small reads, so the SDK's own SSE and UTF-8 decoding are exercised across splits.
      for (let i = 0; i < bytes.length; i += 7) c.enqueue(bytes.slice(i, i + 7));
      c.close();
    },
  });
}

/** Runs the SDK over one fixture: its last message, the errors, the streamed raw inputs. */
async function accumulate(text) {
  const invalid = [];
  const chunks = parseJsonEventStream({
    stream: byteStream(untilDone(text)),
    schema: uiMessageChunkSchema,
  }).pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (result.success) controller.enqueue(result.value);
        else invalid.push(String(result.error?.message ?? result.error));
      },
    }),
  );
  const errors = [];
  const streamedRaw = {};
  let last;
  for await (const message of readUIMessageStream({
    stream: chunks,
    onError: e => errors.push(e instanceof Error ? e.message : String(e)),
  })) {
    last = message;
    for (const p of message.parts) {
      if (p.toolCallId != null && p.state === 'input-streaming' && p.rawInput !== undefined) {
        streamedRaw[p.toolCallId] = p.rawInput;
      }
    }
  }
  return { last, errors, streamedRaw, invalid };
}

/** Differences between the SDK's result and the golden, as lines. */
function compare(sdk, golden) {
  const diffs = [];
  if (sdk.invalid.length) diffs.push(`chunks failing the SDK schema: ${sdk.invalid.join('; ')}`);
  if (sdk.last === undefined) {
    diffs.push('the SDK yielded no message');
    return diffs;
  }
  const want = structuredClone(golden.message);
  for (const p of want.parts) {
    if (!('inputText' in p)) continue;
    const streamed = sdk.streamedRaw[p.toolCallId];
    const ok = p.inputText === '' ? streamed === undefined : streamed === p.inputText;
    if (!ok) {
      diffs.push(
        `tool ${p.toolCallId}: streamed input ${JSON.stringify(streamed)}, golden inputText ${JSON.stringify(p.inputText)}`,
      );
    }
    delete p.inputText;
  }
  const got = plain({ id: sdk.last.id, metadata: sdk.last.metadata, parts: sdk.last.parts });
  if (got.id !== want.id) diffs.push(`message id: sdk ${got.id}, golden ${want.id}`);
  if (!isDeepStrictEqual(got.metadata, want.metadata)) {
    diffs.push(`metadata: sdk ${JSON.stringify(got.metadata)}, golden ${JSON.stringify(want.metadata)}`);
  }
  const n = Math.max(got.parts.length, want.parts.length);
  for (let i = 0; i < n; i++) {
    if (!isDeepStrictEqual(got.parts[i], want.parts[i])) {
      diffs.push(
        `part ${i}:\n    sdk    ${JSON.stringify(got.parts[i])}\n    golden ${JSON.stringify(want.parts[i])}`,
      );
    }
  }
  if (!isDeepStrictEqual(sdk.errors, golden.errors)) {
    diffs.push(`errors: sdk ${JSON.stringify(sdk.errors)}, golden ${JSON.stringify(golden.errors)}`);
  }
  return diffs;
}

let passed = 0;
let failed = 0;
const names = readdirSync(dir)
  .filter(f => f.endsWith('.sse'))
  .map(f => f.slice(0, -'.sse'.length))
  .sort();
for (const name of names) {
  let diffs;
  try {
    const text = readFileSync(join(dir, `${name}.sse`), 'utf8');
    const golden = JSON.parse(readFileSync(join(dir, `${name}.json`), 'utf8'));
    diffs = compare(await accumulate(text), golden);
  } catch (e) {
    diffs = [`error: ${e?.stack ?? e}`];
  }
  if (diffs.length === 0) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}`);
    for (const d of diffs) console.log(`  ${d}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
