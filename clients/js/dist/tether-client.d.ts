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
export type TurnState = "connecting" | "synchronizing" | "live" | "reconnecting" | "ended" | "failed" | "idle";
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
export declare class TetherError extends Error {
    /** A stable code: tether's `error` field, or `retries_exhausted`, `network`, `stream_lost`, `not_a_stream`, `unrecorded`, `bad_frame`, `http_<status>`. */
    readonly code: string;
    /** The HTTP status, when an answer caused the error. */
    readonly status: number | null;
    /** Whether trying again later may work. */
    readonly recoverable: boolean;
    /** The last position applied, to resume from with {@link TetherClient.attach}. */
    cursor: Cursor | null;
    /** A new error. */
    constructor(code: string, message: string, opts?: {
        status?: number | null;
        recoverable?: boolean;
        cause?: unknown;
    });
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
export declare class SseParser {
    private buf;
    private data;
    private hasData;
    private id;
    private skipLf;
    /** Feeds `text`; returns the events it completed, in order. */
    push(text: string): SseFrame[];
    /** True when part of an event has been read but not its blank line. */
    get pending(): boolean;
    private line;
}
/**
 * The pause before a reconnect, in ms, after `fruitless` attempts without progress: doubles from
 * `initialBackoffMs` up to `maxBackoffMs`, minus up to 20% of jitter (so the five pauses before
 * giving up add up to at least 10 s with the defaults: 500, 1000, 2000, 4000, 5000 ms, less jitter).
 */
export declare function backoffDelay(fruitless: number, opts?: {
    initialBackoffMs?: number;
    maxBackoffMs?: number;
    random?: () => number;
}): number;
/**
 * One turn of a chat as this client follows it: from a record request ({@link TetherClient.send})
 * or an attach ({@link TetherClient.attach}) to its `STREAM_END`, across reconnects.
 */
export declare class Turn {
    /** The chat. */
    readonly chatId: string;
    /** Resolves with the run's end; `null` when there was nothing to attach to (`204`) or after {@link close}. Rejects with a {@link TetherError} (`recoverable` after fruitless retries). */
    readonly done: Promise<StreamEnd | null>;
    private readonly client;
    private readonly opts;
    private _state;
    private runId;
    private seq;
    /** Following a superseded run: the reset for the new run is still to be sent. */
    private resetPending;
    private unrecorded;
    private closed;
    private finished;
    private conn;
    private wake;
    private resolve;
    private reject;
    private runIdWaiters;
    private readonly eventListeners;
    private readonly resetListeners;
    private readonly stateListeners;
    private readonly onVisible;
    private readonly onOnline;
    /** The current state. */
    get state(): TurnState;
    /** The run being followed (`null` until known). */
    get run_id(): string | null;
    /** The last position applied (`null` until a run is known). */
    get cursor(): Cursor | null;
    /** Calls `fn` with each upstream event once, in seq order. Returns an unsubscribe function. */
    onEvent(fn: (event: UpstreamEvent, meta: EventMeta) => void): () => void;
    /** Calls `fn` on a `STREAM_SNAPSHOT` (or a followed run): replace what you hold with `events`. */
    onReset(fn: (events: UpstreamEvent[], meta: {
        run_id: string;
        seq: number;
    }) => void): () => void;
    /** Calls `fn` on each state change. */
    onState(fn: (state: TurnState, detail: StateDetail) => void): () => void;
    /**
     * Asks the stop route to stop this turn's run (waits for the run id if it is not known yet).
     * The end itself arrives through {@link done}. Resolves with the route's answer, or `null` when
     * there was nothing to stop.
     */
    stop(): Promise<StopAnswer | null>;
    /** Detaches: no callback after this; the run goes on at tether; {@link done} resolves `null`. */
    close(): void;
    private add;
    private emit;
    private setState;
    private learnRun;
    private settle;
    private visible;
    private wakeNow;
    private sleep;
    private loop;
    private fail;
    private connect;
    private read;
    /** Applies one protocol-1 frame. */
    private apply;
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
export declare class TetherClient {
    private readonly headersOpt;
    private readonly fetchOpt;
    /** A client; see {@link TetherClientOptions} for the defaults. */
    constructor(options?: TetherClientOptions);
    /**
     * Records a turn: POSTs `body` (the backend's own fields and the chat id) to the record route
     * with `"protocol": 1`, and follows the run to its end.
     */
    send(body: Record<string, unknown>, options?: SendOptions): Turn;
    /**
     * Attaches to a chat's run: without a cursor, to the running (or unsaved) turn if there is one;
     * with `run_id` (and `after_seq`), resumes from there. Nothing to attach to: state `idle`,
     * `done` resolves `null`.
     */
    attach(req: AttachRequest): Turn;
    /** The status route's answer for a chat, or `null` when it has no run (`204`). */
    status(chatId: string): Promise<RunStatus | null>;
    /**
     * Asks the stop route to stop a run (`runId`, or the chat's current run). Retries a failed
     * request with the same `cancel_request_id`, so a retry never stops a later run. `null`: no
     * such run (`404`).
     */
    stopRun(chatId: string, runId?: string): Promise<StopAnswer | null>;
    private url;
    private headers;
}
