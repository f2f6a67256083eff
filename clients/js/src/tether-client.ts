/**
 * tether's browser client for protocol 1 (docs/protocol.md): records a turn, attaches to a chat's
 * run, and hands the application one ordered stream of upstream events and state changes while it
 * resumes across dropped connections, reloads, hidden tabs and superseded runs.
 *
 * No runtime dependencies: `fetch`, `ReadableStream`, `TextDecoder` and `AbortController`.
 *
 * @module
 */

/** A turn's connection state, as reported by {@link Turn.onState}. */
export type TurnState =
  | "connecting"
  | "synchronizing"
  | "live"
  | "reconnecting"
  | "ended"
  | "failed"
  | "idle";

/** What a run's `STREAM_END` said. */
export interface StreamEnd {
  /** Whether the backend's answer was saved, as far as tether can tell. */
  persisted: boolean;
  /** Whether a newer run of the chat replaced this one. */
  superseded: boolean;
  /** The run that replaced this one (when superseded), else `null`. */
  next_run_id: string | null;
  /** Why the answer was not persisted (`cancelled`, `upstream_reset`, ...), else `null`. */
  reason: string | null;
  /** The run that ended. */
  run_id: string;
  /** The run's last seq. */
  seq: number;
}

/** A resume position: the last seq applied of a run. */
export interface Cursor {
  /** The run. */
  run_id: string;
  /** The last seq applied (0: nothing yet). */
  after_seq: number;
}

/** Where an event came from, passed with each event. */
export interface EventMeta {
  /** The event's seq in its run (`null` for an unrecorded stream). */
  seq: number | null;
  /** The run (`null` for an unrecorded stream). */
  run_id: string | null;
}

/** An upstream event: the JSON object the backend sent (an AG-UI event for AG-UI backends). */
export type UpstreamEvent = Record<string, unknown>;

/** Extra detail passed with a state change. */
export interface StateDetail {
  /** The run being followed, when known. */
  run_id?: string | null;
  /** `reconnecting`: the number of this attempt since the last progress (1-based). */
  attempt?: number;
  /** `reconnecting`: the pause before the attempt, in milliseconds. */
  delay_ms?: number;
  /** `reconnecting` and `failed`: what went wrong. */
  error?: TetherError;
  /** `ended`: the end. */
  end?: StreamEnd;
}

/** Request headers: a fixed object, or a function called before every request (fresh tokens). */
export type HeadersOption = Record<string, string> | (() => Record<string, string>);

/** The part of `document` the client uses to notice a tab coming back. */
export interface VisibilitySource {
  /** `"visible"` or `"hidden"`. */
  readonly visibilityState: string;
  /** Subscribes to `visibilitychange`. */
  addEventListener(type: "visibilitychange", listener: () => void): void;
  /** Unsubscribes. */
  removeEventListener(type: "visibilitychange", listener: () => void): void;
}

/** The part of `window` the client uses to notice the network coming back. */
export interface OnlineSource {
  /** Subscribes to `online`. */
  addEventListener(type: "online", listener: () => void): void;
  /** Unsubscribes. */
  removeEventListener(type: "online", listener: () => void): void;
}

/** Options of a {@link TetherClient}; every one has a default. */
export interface TetherClientOptions {
  /** Prefix of every route, e.g. `https://chat.example.com`. Default: `""` (same origin). */
  baseUrl?: string;
  /** The record route. Default `/chat`. */
  recordPath?: string;
  /** The attach route. Default `/chat/live`. */
  livePath?: string;
  /** The stop route. Default `/chat/stop`. */
  stopPath?: string;
  /** The status route. Default `/chat/run`. */
  statusPath?: string;
  /** Headers sent on every request (authentication). */
  headers?: HeadersOption;
  /** The body field that holds the chat id (the routes' `chat_id = "body:<field>"`). Default `chat_id`. */
  chatIdField?: string;
  /** `POST` (default) attaches with a JSON body; `GET` with the query and `Last-Event-ID`. */
  attachMethod?: "POST" | "GET";
  /** Follow a superseded run to its `next_run_id` (default `true`). */
  followSuperseded?: boolean;
  /** Reconnect attempts without progress before giving up (default 5). */
  maxAttempts?: number;
  /** First reconnect pause, in ms (default 500); doubles per fruitless attempt. */
  initialBackoffMs?: number;
  /** Longest reconnect pause, in ms (default 5000). */
  maxBackoffMs?: number;
  /** A connection silent for this long (no frame, no heartbeat) is dropped and resumed (default 45000; 0: never). */
  idleTimeoutMs?: number;
  /** After a (re)connect, how long a silent stream stays `synchronizing` before it counts as live (default 250 ms). */
  settleMs?: number;
  /** When a hidden tab becomes visible, a connection that has read nothing for this long is replaced by a fresh attach from the cursor (default 1000 ms). */
  staleMs?: number;
  /** `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /** Where `visibilitychange` comes from (default: the global `document`; `null`: ignore). */
  visibility?: VisibilitySource | null;
  /** Where `online` comes from (default: the global `window`; `null`: ignore). */
  online?: OnlineSource | null;
  /** Random numbers in [0, 1) for the backoff's jitter (default `Math.random`). */
  random?: () => number;
}

/** Per-request options of {@link TetherClient.send}. */
export interface SendOptions {
  /** Query parameters appended to the record route (passed on to the backend). */
  query?: Record<string, string | number | boolean>;
}

/** What {@link TetherClient.attach} takes. */
export interface AttachRequest {
  /** The chat. */
  chat_id: string;
  /** The run of the cursor to resume from. */
  run_id?: string;
  /** The last seq applied of `run_id` (default 0). */
  after_seq?: number;
  /** How long tether may wait for a run when the chat has none (ms, capped by tether). */
  wait_ms?: number;
}

/** The stop route's answer. */
export interface StopAnswer {
  /** The run the stop was about. */
  run_id: string;
  /** Whether the run's producer has stopped (`false`: still stopping, HTTP 202). */
  execution_stopped: boolean;
  /** The `persisted` of the run's end. */
  terminal_persisted: boolean;
}

/** The status route's answer. */
export interface RunStatus {
  /** The chat's current run. */
  run_id: string;
  /** `running` until its `STREAM_END` is decided. */
  status: "running" | "completed";
  /** The run's head. */
  seq: number;
  /** The end's `persisted` (`false` while running). */
  persisted: boolean;
  /** The end's `superseded` (`false` while running). */
  superseded: boolean;
}

/**
 * An error of the client. `recoverable` is true when trying again later may work (retries gave
 * up, tether or the backend was unavailable); `cursor` is where to resume from.
 */
export class TetherError extends Error {
  /** A stable code: tether's `error` field, or `retries_exhausted`, `network`, `stream_lost`, `not_a_stream`, `unrecorded`, `bad_frame`, `http_<status>`. */
  readonly code: string;
  /** The HTTP status, when an answer caused the error. */
  readonly status: number | null;
  /** Whether trying again later may work. */
  readonly recoverable: boolean;
  /** The last position applied, to resume from with {@link TetherClient.attach}. */
  cursor: Cursor | null = null;

  /** A new error. */
  constructor(code: string, message: string, opts: { status?: number | null; recoverable?: boolean; cause?: unknown } = {}) {
    super(message);
    this.name = "TetherError";
    this.code = code;
    this.status = opts.status ?? null;
    this.recoverable = opts.recoverable ?? false;
    if (opts.cause !== undefined) (this as { cause?: unknown }).cause = opts.cause;
  }
}

/** One complete SSE event: its `id:` and its joined `data:` lines. */
export interface SseFrame {
  /** The `id:` field (`null` when absent). */
  id: string | null;
  /** The `data:` lines, joined with `\n`. */
  data: string;
}

/**
 * An incremental SSE parser (the WHATWG rules): feed it text as it arrives, get back only the
 * events whose blank line has arrived. Comments (`: keepalive`) and events without data are
 * skipped; `event:` and `retry:` are ignored.
 */
export class SseParser {
  private buf = "";
  private data: string[] = [];
  private hasData = false;
  private id: string | null = null;
  private skipLf = false;

  /** Feeds `text`; returns the events it completed, in order. */
  push(text: string): SseFrame[] {
    const out: SseFrame[] = [];
    let s = this.buf + text;
    if (this.skipLf && s.startsWith("\n")) s = s.slice(1);
    this.skipLf = false;
    let start = 0;
    for (;;) {
      let end = -1;
      for (let i = start; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c === 10 || c === 13) {
          end = i;
          break;
        }
      }
      if (end < 0) break;
      const line = s.slice(start, end);
      if (s.charCodeAt(end) === 13) {
        if (end + 1 < s.length) {
          start = s.charCodeAt(end + 1) === 10 ? end + 2 : end + 1;
        } else {
          start = end + 1;
          this.skipLf = true;
        }
      } else {
        start = end + 1;
      }
      this.line(line, out);
    }
    this.buf = s.slice(start);
    return out;
  }

  /** True when part of an event has been read but not its blank line. */
  get pending(): boolean {
    return this.buf.length > 0 || this.hasData;
  }

  private line(line: string, out: SseFrame[]): void {
    if (line === "") {
      if (this.hasData) out.push({ id: this.id, data: this.data.join("\n") });
      this.data = [];
      this.hasData = false;
      this.id = null;
      return;
    }
    if (line.charCodeAt(0) === 58 /* ':' */) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") {
      this.data.push(value);
      this.hasData = true;
    } else if (field === "id" && !value.includes("\0")) {
      this.id = value;
    }
  }
}

/**
 * The pause before a reconnect, in ms, after `fruitless` attempts without progress: doubles from
 * `initialBackoffMs` up to `maxBackoffMs`, minus up to 20% of jitter (so the five pauses before
 * giving up add up to at least 10 s with the defaults: 500, 1000, 2000, 4000, 5000 ms, less jitter).
 */
export function backoffDelay(
  fruitless: number,
  opts: { initialBackoffMs?: number; maxBackoffMs?: number; random?: () => number } = {},
): number {
  const initial = opts.initialBackoffMs ?? 500;
  const max = opts.maxBackoffMs ?? 5000;
  const base = Math.min(max, initial * 2 ** Math.min(fruitless, 30));
  return Math.round(base * (0.8 + 0.2 * (opts.random ?? Math.random)()));
}

type Listener<A extends unknown[]> = (...args: A) => void;

/** What one connection ended with. */
type Outcome =
  | { kind: "end"; end: StreamEnd }
  | { kind: "follow"; next: string }
  | { kind: "idle" }
  | { kind: "lost"; error: TetherError }
  | { kind: "fatal"; error: TetherError }
  | { kind: "closed" };

/** One HTTP request of a turn, with its abort handle. */
interface Conn {
  ac: AbortController;
  /** A frame was applied on this connection. */
  progressed: boolean;
  /** The client aborted it to re-attach at once (tab visible again). */
  reattach: boolean;
  /** Time of the last byte read. */
  lastRead: number;
}

type Req = { kind: "record"; body: Record<string, unknown>; query?: SendOptions["query"] } | { kind: "attach"; wait_ms?: number };

const RETRYABLE_STATUS = new Set([408, 425, 429, 500, 502, 503, 504]);

function sseResponse(res: Response): boolean {
  const ct = res.headers.get("content-type") ?? "";
  return ct.split(";")[0].trim().toLowerCase() === "text/event-stream";
}

async function errorFrom(res: Response, recoverable: boolean): Promise<TetherError> {
  let code = `http_${res.status}`;
  let message = `HTTP ${res.status}`;
  try {
    const text = await res.text();
    const j = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof j.error === "string") code = j.error;
    if (typeof j.message === "string") message = j.message;
  } catch {
    // Not tether's JSON error: keep the status.
  }
  return new TetherError(code, message, { status: res.status, recoverable });
}

function asEnd(f: Record<string, unknown>): StreamEnd {
  return {
    persisted: f.persisted === true,
    superseded: f.superseded === true,
    next_run_id: typeof f.next_run_id === "string" ? f.next_run_id : null,
    reason: typeof f.reason === "string" ? f.reason : null,
    run_id: String(f.run_id),
    seq: Number(f.seq),
  };
}

function isFrame(f: unknown): f is Record<string, unknown> & { type: string; run_id: string; seq: number } {
  if (typeof f !== "object" || f === null || Array.isArray(f)) return false;
  const o = f as Record<string, unknown>;
  return typeof o.type === "string" && o.type.startsWith("STREAM_") && typeof o.run_id === "string" && Number.isSafeInteger(o.seq);
}

/**
 * One turn of a chat as this client follows it: from a record request ({@link TetherClient.send})
 * or an attach ({@link TetherClient.attach}) to its `STREAM_END`, across reconnects.
 */
export class Turn {
  /** The chat. */
  readonly chatId: string;
  /** Resolves with the run's end; `null` when there was nothing to attach to (`204`) or after {@link close}. Rejects with a {@link TetherError} (`recoverable` after fruitless retries). */
  readonly done: Promise<StreamEnd | null>;

  private readonly client: TetherClient;
  private readonly opts: Required<Omit<TetherClientOptions, "headers" | "fetch" | "visibility" | "online">>;
  private _state: TurnState = "connecting";
  private runId: string | null = null;
  private seq = 0;
  /** Following a superseded run: the reset for the new run is still to be sent. */
  private resetPending = false;
  private unrecorded = false;
  private closed = false;
  private finished = false;
  private conn: Conn | null = null;
  private wake: (() => void) | null = null;
  private resolve!: (v: StreamEnd | null) => void;
  private reject!: (e: TetherError) => void;
  private runIdWaiters: Array<(id: string | null) => void> = [];
  private readonly eventListeners: Listener<[UpstreamEvent, EventMeta]>[] = [];
  private readonly resetListeners: Listener<[UpstreamEvent[], { run_id: string; seq: number }]>[] = [];
  private readonly stateListeners: Listener<[TurnState, StateDetail]>[] = [];
  private readonly onVisible = () => this.visible();
  private readonly onOnline = () => this.wakeNow();

  /** @internal Use {@link TetherClient.send} or {@link TetherClient.attach}. */
  constructor(client: TetherClient, chatId: string, first: Req, cursor: Cursor | null) {
    this.client = client;
    this.chatId = chatId;
    this.opts = client.settings;
    this.done = new Promise<StreamEnd | null>((res, rej) => {
      this.resolve = res;
      this.reject = rej;
    });
    // Applications that never await `done` must not see an unhandled rejection.
    this.done.catch(() => {});
    if (cursor) {
      this.runId = cursor.run_id;
      this.seq = cursor.after_seq;
    }
    client.visibility?.addEventListener("visibilitychange", this.onVisible);
    client.online?.addEventListener("online", this.onOnline);
    void this.loop(first);
  }

  /** The current state. */
  get state(): TurnState {
    return this._state;
  }

  /** The run being followed (`null` until known). */
  get run_id(): string | null {
    return this.runId;
  }

  /** The last position applied (`null` until a run is known). */
  get cursor(): Cursor | null {
    return this.runId === null ? null : { run_id: this.runId, after_seq: this.seq };
  }

  /** Calls `fn` with each upstream event once, in seq order. Returns an unsubscribe function. */
  onEvent(fn: (event: UpstreamEvent, meta: EventMeta) => void): () => void {
    return this.add(this.eventListeners, fn);
  }

  /** Calls `fn` on a `STREAM_SNAPSHOT` (or a followed run): replace what you hold with `events`. */
  onReset(fn: (events: UpstreamEvent[], meta: { run_id: string; seq: number }) => void): () => void {
    return this.add(this.resetListeners, fn);
  }

  /** Calls `fn` on each state change. */
  onState(fn: (state: TurnState, detail: StateDetail) => void): () => void {
    return this.add(this.stateListeners, fn);
  }

  /**
   * Asks the stop route to stop this turn's run (waits for the run id if it is not known yet).
   * The end itself arrives through {@link done}. Resolves with the route's answer, or `null` when
   * there was nothing to stop.
   */
  async stop(): Promise<StopAnswer | null> {
    let runId = this.runId;
    if (runId === null && !this.finished) {
      runId = await new Promise<string | null>((r) => this.runIdWaiters.push(r));
    }
    if (runId === null) return null;
    return this.client.stopRun(this.chatId, runId);
  }

  /** Detaches: no callback after this; the run goes on at tether; {@link done} resolves `null`. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.conn?.ac.abort();
    this.wake?.();
    this.settle();
    this.resolve(null);
  }

  // ---- internals ----

  private add<F>(list: F[], fn: F): () => void {
    list.push(fn);
    return () => {
      const i = list.indexOf(fn);
      if (i >= 0) list.splice(i, 1);
    };
  }

  private emit<A extends unknown[]>(list: Listener<A>[], ...args: A): void {
    for (const fn of list.slice()) {
      if (this.closed) return;
      try {
        fn(...args);
      } catch (e) {
        // A listener's bug must not break the stream; report it like an uncaught error.
        setTimeout(() => {
          throw e;
        });
      }
    }
  }

  private setState(s: TurnState, detail: StateDetail = {}): void {
    if (this.closed) return;
    if (s === this._state && s !== "reconnecting") return;
    this._state = s;
    this.emit(this.stateListeners, s, { run_id: this.runId, ...detail });
  }

  private learnRun(id: string): void {
    this.runId = id;
    const w = this.runIdWaiters;
    this.runIdWaiters = [];
    w.forEach((r) => r(id));
  }

  private settle(): void {
    this.finished = true;
    this.client.visibility?.removeEventListener("visibilitychange", this.onVisible);
    this.client.online?.removeEventListener("online", this.onOnline);
    const w = this.runIdWaiters;
    this.runIdWaiters = [];
    w.forEach((r) => r(null));
  }

  private visible(): void {
    if (this.client.visibility?.visibilityState !== "visible") return;
    const c = this.conn;
    if (c && this._state !== "reconnecting" && Date.now() - c.lastRead >= this.opts.staleMs) {
      // The tab was hidden: its connection may have died silently. Resume from the cursor.
      c.reattach = true;
      c.ac.abort();
    }
    this.wakeNow();
  }

  private wakeNow(): void {
    this.wake?.();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((r) => {
      const t = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(t);
        self.wake = null;
        r();
      }
      this.wake = done;
    });
  }

  private async loop(first: Req): Promise<void> {
    let req: Req = first;
    let reconnecting = false;
    let fruitless = 0;
    for (;;) {
      const conn: Conn = { ac: new AbortController(), progressed: false, reattach: false, lastRead: Date.now() };
      this.conn = conn;
      let outcome: Outcome;
      try {
        outcome = await this.connect(req, conn);
      } catch (e) {
        outcome = { kind: "lost", error: new TetherError("network", String((e as Error)?.message ?? e), { recoverable: true, cause: e }) };
      } finally {
        conn.ac.abort();
        this.conn = null;
      }
      if (this.closed) return;
      switch (outcome.kind) {
        case "closed":
          return;
        case "end":
          this.settle();
          this.setState("ended", { end: outcome.end });
          this.resolve(outcome.end);
          return;
        case "idle":
          this.settle();
          this.setState("idle");
          this.resolve(null);
          return;
        case "fatal":
          this.fail(outcome.error);
          return;
        case "follow":
          this.learnRun(outcome.next);
          this.seq = 0;
          this.resetPending = true;
          fruitless = 0;
          req = { kind: "attach" };
          reconnecting = true;
          this.setState("synchronizing");
          continue;
        case "lost":
          break;
      }
      if (this.unrecorded) {
        this.fail(new TetherError("unrecorded", "tether did not record this turn (its recorder was full) and the stream ended without STREAM_END; reload the chat's history", { recoverable: false, cause: outcome.error }));
        return;
      }
      if (conn.progressed) fruitless = 0;
      else if (reconnecting && !conn.reattach) fruitless++;
      if (fruitless >= this.opts.maxAttempts) {
        const err = new TetherError("retries_exhausted", `no progress after ${fruitless} reconnect attempts: ${outcome.error.message}`, { recoverable: true, cause: outcome.error });
        this.fail(err);
        return;
      }
      req = { kind: "attach" };
      reconnecting = true;
      const delay = conn.reattach ? 0 : backoffDelay(fruitless, this.opts);
      this.setState("reconnecting", { attempt: fruitless + 1, delay_ms: delay, error: outcome.error });
      if (delay > 0) await this.sleep(delay);
      if (this.closed) return;
    }
  }

  private fail(err: TetherError): void {
    err.cursor = this.cursor;
    this.settle();
    this.setState("failed", { error: err });
    this.reject(err);
  }

  private async connect(req: Req, conn: Conn): Promise<Outcome> {
    const { url, init } = this.client.request(req, this.chatId, this.cursor);
    init.signal = conn.ac.signal;
    const res = await this.client.fetchImpl(url, init);
    if (this.closed) return { kind: "closed" };
    if (req.kind === "record") {
      if (!res.ok) return { kind: "fatal", error: await errorFrom(res, RETRYABLE_STATUS.has(res.status)) };
      if (!sseResponse(res) || !res.body) {
        return { kind: "fatal", error: new TetherError("not_a_stream", `the record route answered ${res.status} ${res.headers.get("content-type") ?? "without a content type"}, not an event stream`, { status: res.status }) };
      }
      const rid = res.headers.get("x-tether-run-id");
      if (rid && this.runId === null) this.learnRun(rid);
    } else {
      if (res.status === 204) return { kind: "idle" };
      if (!res.ok) {
        const retry = RETRYABLE_STATUS.has(res.status);
        const error = await errorFrom(res, retry);
        return retry ? { kind: "lost", error } : { kind: "fatal", error };
      }
      if (!sseResponse(res) || !res.body) {
        return { kind: "fatal", error: new TetherError("not_a_stream", `the attach route answered ${res.status} without an event stream`, { status: res.status }) };
      }
    }
    this.setState("synchronizing");
    return this.read(res.body, conn, req.kind === "record");
  }

  private async read(body: ReadableStream<Uint8Array>, conn: Conn, record: boolean): Promise<Outcome> {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    let first = true;
    let settleTimer: ReturnType<typeof setTimeout> | undefined = setTimeout(() => {
      if (this._state === "synchronizing") this.setState("live");
    }, this.opts.settleMs);
    let idleTimer: ReturnType<typeof setTimeout> | undefined;
    let idled = false;
    const armIdle = () => {
      if (!this.opts.idleTimeoutMs) return;
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => {
        idled = true;
        conn.ac.abort();
      }, this.opts.idleTimeoutMs);
    };
    armIdle();
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (e) {
          if (this.closed) return { kind: "closed" };
          const why = idled ? `no data for ${this.opts.idleTimeoutMs} ms` : conn.reattach ? "re-attaching" : String((e as Error)?.message ?? e);
          return { kind: "lost", error: new TetherError("network", `the stream was cut: ${why}`, { recoverable: true, cause: e }) };
        }
        if (this.closed) return { kind: "closed" };
        if (chunk.done) {
          const tail = decoder.decode();
          if (tail) parser.push(tail);
          const partial = parser.pending ? " (an incomplete frame was dropped)" : "";
          return { kind: "lost", error: new TetherError("stream_lost", `the stream ended without STREAM_END${partial}`, { recoverable: true }) };
        }
        conn.lastRead = Date.now();
        armIdle();
        const frames = parser.push(decoder.decode(chunk.value, { stream: true }));
        let applied = false;
        for (const f of frames) {
          let j: unknown;
          try {
            j = JSON.parse(f.data);
          } catch {
            if (record && first) {
              this.unrecorded = true;
            } else {
              return { kind: "lost", error: new TetherError("bad_frame", "a frame's data is not JSON", { recoverable: true }) };
            }
          }
          if (first && record && !this.unrecorded && !isFrame(j)) this.unrecorded = true;
          first = false;
          if (this.unrecorded) {
            const ev = typeof j === "object" && j !== null && !Array.isArray(j) ? (j as UpstreamEvent) : { type: "RAW", source: "sse", event: { event: "message", data: f.data } };
            this.emit(this.eventListeners, ev, { seq: null, run_id: null });
            applied = true;
            continue;
          }
          if (!isFrame(j)) continue; // not a protocol-1 frame: ignored (fields may be added, types too)
          const r = this.apply(j, conn);
          if (r === "applied") applied = true;
          else if (r === "gap") {
            return { kind: "lost", error: new TetherError("gap", "a frame arrived out of order; resuming from the cursor", { recoverable: true }) };
          } else if (r !== "skipped") return r;
        }
        if (applied && this._state === "synchronizing") {
          clearTimeout(settleTimer);
          settleTimer = undefined;
          this.setState("live");
        }
      }
    } finally {
      clearTimeout(settleTimer);
      clearTimeout(idleTimer);
      reader.cancel().catch(() => {});
    }
  }

  /** Applies one protocol-1 frame. */
  private apply(f: Record<string, unknown> & { type: string; run_id: string; seq: number }, conn: Conn): "applied" | "skipped" | "gap" | Outcome {
    switch (f.type) {
      case "STREAM_SNAPSHOT": {
        const events = Array.isArray(f.events) ? (f.events as UpstreamEvent[]) : [];
        if (f.run_id !== this.runId) this.learnRun(f.run_id);
        this.seq = f.seq;
        this.resetPending = false;
        conn.progressed = true;
        this.emit(this.resetListeners, events, { run_id: f.run_id, seq: f.seq });
        // The catch-up is applied: the frames after a snapshot are live.
        if (this._state === "synchronizing") this.setState("live");
        return "applied";
      }
      case "STREAM_EVENT": {
        if (f.run_id !== this.runId) return "skipped";
        if (f.seq <= this.seq) return "skipped";
        if (f.seq !== this.seq + 1) return "gap";
        if (this.resetPending) {
          this.resetPending = false;
          this.emit(this.resetListeners, [], { run_id: f.run_id, seq: this.seq });
        }
        this.seq = f.seq;
        conn.progressed = true;
        const ev = typeof f.event === "object" && f.event !== null ? (f.event as UpstreamEvent) : {};
        this.emit(this.eventListeners, ev, { seq: f.seq, run_id: f.run_id });
        return "applied";
      }
      case "STREAM_END": {
        if (f.run_id !== this.runId) return "skipped";
        if (f.seq > this.seq) return "gap";
        conn.progressed = true;
        if (this.resetPending) {
          this.resetPending = false;
          this.emit(this.resetListeners, [], { run_id: f.run_id, seq: this.seq });
        }
        // The catch-up reached the end: it was live up to here.
        if (this._state === "synchronizing") this.setState("live");
        const end = asEnd(f);
        if (end.superseded && end.next_run_id && this.opts.followSuperseded) {
          return { kind: "follow", next: end.next_run_id };
        }
        return { kind: "end", end };
      }
      default:
        return "skipped";
    }
  }
}

/**
 * A client of one tether deployment.
 *
 * ```js
 * const client = new TetherClient();
 * const turn = client.send({ chat_id: "c1", message: "hi" });
 * turn.onEvent((event, { seq }) => render(event));
 * turn.onReset((events) => replaceAll(events));
 * turn.onState((state) => showState(state));
 * const end = await turn.done;
 * ```
 */
export class TetherClient {
  /** @internal */
  readonly settings: Required<Omit<TetherClientOptions, "headers" | "fetch" | "visibility" | "online">>;
  /** @internal */
  readonly visibility: VisibilitySource | null;
  /** @internal */
  readonly online: OnlineSource | null;
  private readonly headersOpt: HeadersOption;
  private readonly fetchOpt: typeof fetch | undefined;

  /** A client; see {@link TetherClientOptions} for the defaults. */
  constructor(options: TetherClientOptions = {}) {
    const g = globalThis as unknown as { document?: VisibilitySource; addEventListener?: unknown };
    this.settings = {
      baseUrl: options.baseUrl ?? "",
      recordPath: options.recordPath ?? "/chat",
      livePath: options.livePath ?? "/chat/live",
      stopPath: options.stopPath ?? "/chat/stop",
      statusPath: options.statusPath ?? "/chat/run",
      chatIdField: options.chatIdField ?? "chat_id",
      attachMethod: options.attachMethod ?? "POST",
      followSuperseded: options.followSuperseded ?? true,
      maxAttempts: options.maxAttempts ?? 5,
      initialBackoffMs: options.initialBackoffMs ?? 500,
      maxBackoffMs: options.maxBackoffMs ?? 5000,
      idleTimeoutMs: options.idleTimeoutMs ?? 45000,
      settleMs: options.settleMs ?? 250,
      staleMs: options.staleMs ?? 1000,
      random: options.random ?? Math.random,
    };
    this.headersOpt = options.headers ?? {};
    this.fetchOpt = options.fetch;
    this.visibility = options.visibility !== undefined ? options.visibility : (g.document ?? null);
    this.online = options.online !== undefined ? options.online : typeof g.addEventListener === "function" ? (globalThis as unknown as OnlineSource) : null;
  }

  /**
   * Records a turn: POSTs `body` (the backend's own fields and the chat id) to the record route
   * with `"protocol": 1`, and follows the run to its end.
   */
  send(body: Record<string, unknown>, options: SendOptions = {}): Turn {
    const chatId = body[this.settings.chatIdField];
    if (typeof chatId !== "string") throw new TypeError(`send: the body needs a string "${this.settings.chatIdField}"`);
    return new Turn(this, chatId, { kind: "record", body: { ...body, protocol: 1 }, query: options.query }, null);
  }

  /**
   * Attaches to a chat's run: without a cursor, to the running (or unsaved) turn if there is one;
   * with `run_id` (and `after_seq`), resumes from there. Nothing to attach to: state `idle`,
   * `done` resolves `null`.
   */
  attach(req: AttachRequest): Turn {
    if (typeof req.chat_id !== "string") throw new TypeError("attach: chat_id must be a string");
    const cursor = req.run_id ? { run_id: req.run_id, after_seq: req.after_seq ?? 0 } : null;
    return new Turn(this, req.chat_id, { kind: "attach", wait_ms: req.wait_ms }, cursor);
  }

  /** The status route's answer for a chat, or `null` when it has no run (`204`). */
  async status(chatId: string): Promise<RunStatus | null> {
    const url = `${this.url(this.settings.statusPath)}?${new URLSearchParams({ chat_id: chatId })}`;
    const res = await this.fetchImpl(url, { method: "GET", headers: this.headers() });
    if (res.status === 204) return null;
    if (!res.ok) throw await errorFrom(res, RETRYABLE_STATUS.has(res.status));
    return (await res.json()) as RunStatus;
  }

  /**
   * Asks the stop route to stop a run (`runId`, or the chat's current run). Retries a failed
   * request with the same `cancel_request_id`, so a retry never stops a later run. `null`: no
   * such run (`404`).
   */
  async stopRun(chatId: string, runId?: string): Promise<StopAnswer | null> {
    const body: Record<string, unknown> = { [this.settings.chatIdField]: chatId, cancel_request_id: randomId() };
    if (runId) body.run_id = runId;
    let last: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, 250 * attempt));
      let res: Response;
      try {
        res = await this.fetchImpl(this.url(this.settings.stopPath), {
          method: "POST",
          headers: { ...this.headers(), "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      } catch (e) {
        last = e;
        continue;
      }
      if (res.status === 404) return null;
      if (res.ok) return (await res.json()) as StopAnswer;
      const err = await errorFrom(res, RETRYABLE_STATUS.has(res.status));
      if (!err.recoverable) throw err;
      last = err;
    }
    if (last instanceof TetherError) throw last;
    throw new TetherError("network", `the stop request failed: ${String((last as Error)?.message ?? last)}`, { recoverable: true, cause: last });
  }

  /** @internal */
  fetchImpl(url: string, init: RequestInit): Promise<Response> {
    const f = this.fetchOpt ?? globalThis.fetch;
    return f(url, init);
  }

  /** @internal The HTTP request of a turn's connection. */
  request(req: Req, chatId: string, cursor: Cursor | null): { url: string; init: RequestInit } {
    const s = this.settings;
    const headers: Record<string, string> = { ...this.headers(), accept: "text/event-stream" };
    if (req.kind === "record") {
      let url = this.url(s.recordPath);
      if (req.query && Object.keys(req.query).length) {
        const q = new URLSearchParams();
        for (const [k, v] of Object.entries(req.query)) q.set(k, String(v));
        url += `?${q}`;
      }
      headers["content-type"] = "application/json";
      return { url, init: { method: "POST", headers, body: JSON.stringify(req.body) } };
    }
    if (s.attachMethod === "GET") {
      const q = new URLSearchParams({ chat_id: chatId });
      if (!cursor && req.wait_ms) q.set("wait_ms", String(req.wait_ms));
      if (cursor) headers["last-event-id"] = `${cursor.run_id}:${cursor.after_seq}`;
      return { url: `${this.url(s.livePath)}?${q}`, init: { method: "GET", headers } };
    }
    const body: Record<string, unknown> = { [s.chatIdField]: chatId, protocol: 1 };
    if (cursor) {
      body.run_id = cursor.run_id;
      body.after_seq = cursor.after_seq;
    } else if (req.wait_ms) {
      body.wait_ms = req.wait_ms;
    }
    headers["content-type"] = "application/json";
    return { url: this.url(s.livePath), init: { method: "POST", headers, body: JSON.stringify(body) } };
  }

  private url(path: string): string {
    return this.settings.baseUrl.replace(/\/+$/, "") + path;
  }

  private headers(): Record<string, string> {
    const h = this.headersOpt;
    return { ...(typeof h === "function" ? h() : h) };
  }
}

function randomId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}
