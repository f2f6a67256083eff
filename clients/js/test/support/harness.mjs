// Test support for the library's unit tests: golden protocol-1 fixtures, a reducer of AG-UI
// events, fake `fetch` answers whose bodies arrive in chosen chunks, and a model of tether's
// attach answers (replay after a cursor, snapshot without one).

import { readFileSync } from "node:fs";

const FIXTURES = new URL("../../../../tests/fixtures/protocol1/", import.meta.url);

/** The text of `tests/fixtures/protocol1/<name>`. */
export function fixtureText(name) {
  return readFileSync(new URL(name, FIXTURES), "utf8");
}

/** The golden reduced state `tests/fixtures/protocol1/<name>.json`. */
export function golden(name) {
  return JSON.parse(fixtureText(`${name}.json`));
}

/**
 * The blocks of an SSE text, each with its byte range: `{ text, start, end, frame }` where
 * `frame` is the parsed JSON of its `data:` line (null for a comment block).
 */
export function blocks(text) {
  const bytes = Buffer.from(text, "utf8");
  const out = [];
  let start = 0;
  for (;;) {
    const i = bytes.indexOf("\n\n", start);
    if (i < 0) break;
    const end = i + 2;
    const t = bytes.subarray(start, end).toString("utf8");
    const data = t.split("\n").find((l) => l.startsWith("data: "));
    out.push({ text: t, start, end, frame: data ? JSON.parse(data.slice(6)) : null });
    start = end;
  }
  if (start !== bytes.length) throw new Error("a fixture must end with a blank line");
  return out;
}

/** The frames of an SSE text (comments left out). */
export function frames(text) {
  return blocks(text)
    .map((b) => b.frame)
    .filter(Boolean);
}

/** The SSE text of one frame, as tether writes it. */
export function frameText(f) {
  return `id: ${f.run_id}:${f.seq}\ndata: ${JSON.stringify(f)}\n\n`;
}

/**
 * What an application holds after `events`: messages' text by id, reasoning by id, tool calls'
 * arguments by id, and every other event's type in order. Merged (compacted) deltas reduce to
 * the same state as the deltas one by one.
 */
export function reduce(events) {
  const s = { text: {}, reasoning: {}, tools: {}, other: [] };
  for (const e of events) {
    switch (e.type) {
      case "TEXT_MESSAGE_CONTENT":
        s.text[e.messageId] = (s.text[e.messageId] ?? "") + e.delta;
        break;
      case "REASONING_MESSAGE_CONTENT":
        s.reasoning[e.messageId] = (s.reasoning[e.messageId] ?? "") + e.delta;
        break;
      case "TOOL_CALL_ARGS":
        s.tools[e.toolCallId] = (s.tools[e.toolCallId] ?? "") + e.delta;
        break;
      default:
        s.other.push(e.type);
    }
  }
  return s;
}

/** `bytes` cut at the sorted offsets `cuts`. */
export function cut(bytes, cuts) {
  const out = [];
  let prev = 0;
  for (const c of cuts) {
    if (c > prev && c < bytes.length) {
      out.push(bytes.subarray(prev, c));
      prev = c;
    }
  }
  out.push(bytes.subarray(prev));
  return out.filter((b) => b.length > 0);
}

/**
 * A fake answer. `chunks` (strings or bytes) arrive one per read; then the body closes cleanly
 * (`end: "close"`), fails (`"error"`), or stays open until the request is aborted (`"hang"`).
 */
export function sse(chunks, { status = 200, headers = {}, end = "close", signal } = {}) {
  const enc = new TextEncoder();
  const queue = chunks.map((c) => (typeof c === "string" ? enc.encode(c) : c));
  let ctrl;
  const body = new ReadableStream({
    start(c) {
      ctrl = c;
      signal?.addEventListener("abort", () => {
        try {
          c.error(new DOMException("The operation was aborted.", "AbortError"));
        } catch {
          // already closed
        }
      });
    },
    pull(c) {
      if (signal?.aborted) return;
      const next = queue.shift();
      if (next) {
        c.enqueue(next);
        return;
      }
      if (end === "close") c.close();
      else if (end === "error") c.error(new TypeError("terminated"));
      else return new Promise(() => {}); // hang until aborted
    },
  });
  void ctrl;
  return new Response(body, {
    status,
    headers: { "content-type": "text/event-stream", ...headers },
  });
}

/** A JSON answer. */
export function json(status, body) {
  return new Response(body === undefined ? null : JSON.stringify(body), {
    status,
    headers: body === undefined ? {} : { "content-type": "application/json" },
  });
}

/**
 * A fake `fetch`: `handler(req)` answers each request, where `req` is `{ url, method, headers,
 * body (parsed JSON or null), signal, n }`. `calls` lists the requests.
 */
export function fakeFetch(handler) {
  const calls = [];
  const fetch = async (url, init = {}) => {
    const req = {
      url,
      path: url.split("?")[0],
      query: new URLSearchParams(url.split("?")[1] ?? ""),
      method: init.method ?? "GET",
      headers: Object.fromEntries(Object.entries(init.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
      body: init.body ? JSON.parse(init.body) : null,
      signal: init.signal,
      n: calls.length,
    };
    calls.push(req);
    if (init.signal?.aborted) throw new DOMException("The operation was aborted.", "AbortError");
    return handler(req);
  };
  return { fetch, calls };
}

/**
 * tether's attach answers for the runs of one chat, built from complete golden streams: with a
 * cursor of a known run, the `STREAM_EVENT`s after it and the `STREAM_END` (optionally starting
 * `overlap` frames early, to test dedupe); without one, or for an unknown run, a snapshot of the
 * current run (the last one given), then its end.
 */
export class FakeTether {
  constructor(...runs) {
    this.runs = new Map();
    for (const text of runs) {
      const fs = frames(text);
      this.runs.set(fs[0].run_id, fs);
      this.current = fs[0].run_id;
    }
    this.overlap = 0;
  }

  /** The SSE text answering an attach with `cursor` (`null`: none). */
  answer(cursor) {
    const run = cursor && this.runs.get(cursor.run_id);
    if (run) {
      const from = Math.max(0, cursor.after_seq - this.overlap);
      return run
        .filter((f) => (f.type === "STREAM_EVENT" && f.seq > from) || f.type === "STREAM_END")
        .map(frameText)
        .join("");
    }
    const fs = this.runs.get(this.current);
    const events = fs.filter((f) => f.type === "STREAM_EVENT");
    const end = fs.find((f) => f.type === "STREAM_END");
    const snap = {
      type: "STREAM_SNAPSHOT",
      run_id: this.current,
      seq: end.seq,
      events: events.map((f) => f.event),
    };
    return frameText(snap) + frameText(end);
  }
}

/** The cursor an attach request carries (POST body or GET `Last-Event-ID`), or null. */
export function cursorOf(req) {
  if (req.method === "GET") {
    const id = req.headers["last-event-id"];
    if (!id) return null;
    const i = id.lastIndexOf(":");
    return { run_id: id.slice(0, i), after_seq: Number(id.slice(i + 1)) };
  }
  if (!req.body?.run_id) return null;
  return { run_id: req.body.run_id, after_seq: req.body.after_seq ?? 0 };
}

/**
 * Everything a turn told the application: `events` is what it holds (resets replace it),
 * `log` every callback in order, `states` the state names.
 */
export function watch(turn) {
  const w = { events: [], log: [], states: [turn.state], seqs: [] };
  turn.onReset((events, meta) => {
    w.events = events.slice();
    w.log.push(["reset", meta.run_id, meta.seq, events.length]);
  });
  turn.onEvent((event, meta) => {
    w.events.push(event);
    w.seqs.push(`${meta.run_id}:${meta.seq}`);
    w.log.push(["event", meta.run_id, meta.seq]);
  });
  turn.onState((state, detail) => {
    w.states.push(state);
    w.log.push(["state", state, detail]);
  });
  return w;
}

/** Options for quick tests: no real pauses, no visibility or online sources. */
export function quick(extra = {}) {
  return {
    baseUrl: "http://tether.test",
    initialBackoffMs: 0,
    maxBackoffMs: 0,
    settleMs: 5,
    visibility: null,
    online: null,
    ...extra,
  };
}

/** Checks that each run's seqs arrived in order with no repeats. */
export function assertOrdered(assert, w) {
  const last = new Map();
  for (const entry of w.log) {
    if (entry[0] === "reset") last.set(entry[1], entry[2]);
    if (entry[0] === "event") {
      const prev = last.get(entry[1]) ?? 0;
      assert.equal(entry[2], prev + 1, `seq ${entry[2]} of ${entry[1]} after ${prev}`);
      last.set(entry[1], entry[2]);
    }
  }
}
