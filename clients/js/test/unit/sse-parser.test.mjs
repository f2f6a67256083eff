// The incremental SSE parser: only events whose blank line has arrived, every line ending,
// comments skipped, multi-line data joined.

import assert from "node:assert/strict";
import { test } from "node:test";

import { SseParser } from "../../dist/tether-client.js";

const all = (chunks) => {
  const p = new SseParser();
  return chunks.flatMap((c) => p.push(c));
};

test("an event is complete only at its blank line", () => {
  const p = new SseParser();
  assert.deepEqual(p.push("id: r:1\ndata: {\"a\":1}\n"), []);
  assert.equal(p.pending, true);
  assert.deepEqual(p.push("\n"), [{ id: "r:1", data: '{"a":1}' }]);
  assert.equal(p.pending, false);
});

test("LF, CRLF and CR line endings, split anywhere", () => {
  const want = [
    { id: "a", data: "1" },
    { id: null, data: "2\n3" },
  ];
  for (const text of ["id: a\ndata: 1\n\ndata: 2\ndata: 3\n\n", "id: a\r\ndata: 1\r\n\r\ndata: 2\r\ndata: 3\r\n\r\n", "id: a\rdata: 1\r\rdata: 2\rdata: 3\r\r"]) {
    for (let i = 0; i <= text.length; i++) {
      assert.deepEqual(all([text.slice(0, i), text.slice(i)]), want, JSON.stringify([text.slice(0, i), text.slice(i)]));
    }
    assert.deepEqual(all([...text]), want);
  }
});

test("comments, events without data, event: and retry: are skipped", () => {
  assert.deepEqual(all([": keepalive\n\nevent: x\nretry: 5\n\ndata:no-space\nevent: y\n\n:c\n"]), [{ id: null, data: "no-space" }]);
});

test("a field without a colon and an empty data line", () => {
  assert.deepEqual(all(["data\n\ndata:\ndata: x\n\n"]), [
    { id: null, data: "" },
    { id: null, data: "\nx" },
  ]);
});
