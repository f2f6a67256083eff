/**
 * tether's browser client for protocol 1 (docs/protocol.md): records a turn, attaches to a chat's
 * run, and hands the application one ordered stream of upstream events and state changes while it
 * resumes across dropped connections, reloads, hidden tabs and superseded runs.
 *
 * No runtime dependencies: `fetch`, `ReadableStream`, `TextDecoder` and `AbortController`.
 *
 * @module
 */
/**
 * An error of the client. `recoverable` is true when trying again later may work (retries gave
 * up, tether or the backend was unavailable); `cursor` is where to resume from.
 */
export class TetherError extends Error {
    /** A new error. */
    constructor(code, message, opts = {}) {
        super(message);
        /** The last position applied, to resume from with {@link TetherClient.attach}. */
        this.cursor = null;
        this.name = "TetherError";
        this.code = code;
        this.status = opts.status ?? null;
        this.recoverable = opts.recoverable ?? false;
        if (opts.cause !== undefined)
            this.cause = opts.cause;
    }
}
/**
 * An incremental SSE parser (the WHATWG rules): feed it text as it arrives, get back only the
 * events whose blank line has arrived. Comments (`: keepalive`) and events without data are
 * skipped; `event:` and `retry:` are ignored.
 */
export class SseParser {
    constructor() {
        this.buf = "";
        this.data = [];
        this.hasData = false;
        this.id = null;
        this.skipLf = false;
    }
    /** Feeds `text`; returns the events it completed, in order. */
    push(text) {
        const out = [];
        let s = this.buf + text;
        if (this.skipLf && s.startsWith("\n"))
            s = s.slice(1);
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
            if (end < 0)
                break;
            const line = s.slice(start, end);
            if (s.charCodeAt(end) === 13) {
                if (end + 1 < s.length) {
                    start = s.charCodeAt(end + 1) === 10 ? end + 2 : end + 1;
                }
                else {
                    start = end + 1;
                    this.skipLf = true;
                }
            }
            else {
                start = end + 1;
            }
            this.line(line, out);
        }
        this.buf = s.slice(start);
        return out;
    }
    /** True when part of an event has been read but not its blank line. */
    get pending() {
        return this.buf.length > 0 || this.hasData;
    }
    line(line, out) {
        if (line === "") {
            if (this.hasData)
                out.push({ id: this.id, data: this.data.join("\n") });
            this.data = [];
            this.hasData = false;
            this.id = null;
            return;
        }
        if (line.charCodeAt(0) === 58 /* ':' */)
            return;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" "))
            value = value.slice(1);
        if (field === "data") {
            this.data.push(value);
            this.hasData = true;
        }
        else if (field === "id" && !value.includes("\0")) {
            this.id = value;
        }
    }
}
/**
 * The pause before a reconnect, in ms, after `fruitless` attempts without progress: doubles from
 * `initialBackoffMs` up to `maxBackoffMs`, minus up to 20% of jitter (so the five pauses before
 * giving up add up to at least 10 s with the defaults: 500, 1000, 2000, 4000, 5000 ms, less jitter).
 */
export function backoffDelay(fruitless, opts = {}) {
    const initial = opts.initialBackoffMs ?? 500;
    const max = opts.maxBackoffMs ?? 5000;
    const base = Math.min(max, initial * 2 ** Math.min(fruitless, 30));
    return Math.round(base * (0.8 + 0.2 * (opts.random ?? Math.random)()));
}
const RETRYABLE_STATUS = new Set([408, 425, 429, 500, 502, 503, 504]);
function sseResponse(res) {
    const ct = res.headers.get("content-type") ?? "";
    return ct.split(";")[0].trim().toLowerCase() === "text/event-stream";
}
async function errorFrom(res, recoverable) {
    let code = `http_${res.status}`;
    let message = `HTTP ${res.status}`;
    try {
        const text = await res.text();
        const j = JSON.parse(text);
        if (typeof j.error === "string")
            code = j.error;
        if (typeof j.message === "string")
            message = j.message;
    }
    catch {
        // Not tether's JSON error: keep the status.
    }
    return new TetherError(code, message, { status: res.status, recoverable });
}
function asEnd(f) {
    return {
        persisted: f.persisted === true,
        superseded: f.superseded === true,
        next_run_id: typeof f.next_run_id === "string" ? f.next_run_id : null,
        reason: typeof f.reason === "string" ? f.reason : null,
        run_id: String(f.run_id),
        seq: Number(f.seq),
    };
}
function isFrame(f) {
    if (typeof f !== "object" || f === null || Array.isArray(f))
        return false;
    const o = f;
    return typeof o.type === "string" && o.type.startsWith("STREAM_") && typeof o.run_id === "string" && Number.isSafeInteger(o.seq);
}
/**
 * One turn of a chat as this client follows it: from a record request ({@link TetherClient.send})
 * or an attach ({@link TetherClient.attach}) to its `STREAM_END`, across reconnects.
 */
export class Turn {
    /** @internal Use {@link TetherClient.send} or {@link TetherClient.attach}. */
    constructor(client, chatId, first, cursor) {
        this._state = "connecting";
        this.runId = null;
        this.seq = 0;
        /** Following a superseded run: the reset for the new run is still to be sent. */
        this.resetPending = false;
        this.unrecorded = false;
        this.closed = false;
        this.finished = false;
        this.conn = null;
        this.wake = null;
        this.runIdWaiters = [];
        this.eventListeners = [];
        this.resetListeners = [];
        this.stateListeners = [];
        this.onVisible = () => this.visible();
        this.onOnline = () => this.wakeNow();
        this.client = client;
        this.chatId = chatId;
        this.opts = client.settings;
        this.done = new Promise((res, rej) => {
            this.resolve = res;
            this.reject = rej;
        });
        // Applications that never await `done` must not see an unhandled rejection.
        this.done.catch(() => { });
        if (cursor) {
            this.runId = cursor.run_id;
            this.seq = cursor.after_seq;
        }
        client.visibility?.addEventListener("visibilitychange", this.onVisible);
        client.online?.addEventListener("online", this.onOnline);
        void this.loop(first);
    }
    /** The current state. */
    get state() {
        return this._state;
    }
    /** The run being followed (`null` until known). */
    get run_id() {
        return this.runId;
    }
    /** The last position applied (`null` until a run is known). */
    get cursor() {
        return this.runId === null ? null : { run_id: this.runId, after_seq: this.seq };
    }
    /** Calls `fn` with each upstream event once, in seq order. Returns an unsubscribe function. */
    onEvent(fn) {
        return this.add(this.eventListeners, fn);
    }
    /** Calls `fn` on a `STREAM_SNAPSHOT` (or a followed run): replace what you hold with `events`. */
    onReset(fn) {
        return this.add(this.resetListeners, fn);
    }
    /** Calls `fn` on each state change. */
    onState(fn) {
        return this.add(this.stateListeners, fn);
    }
    /**
     * Asks the stop route to stop this turn's run (waits for the run id if it is not known yet).
     * The end itself arrives through {@link done}. Resolves with the route's answer, or `null` when
     * there was nothing to stop.
     */
    async stop() {
        let runId = this.runId;
        if (runId === null && !this.finished) {
            runId = await new Promise((r) => this.runIdWaiters.push(r));
        }
        if (runId === null)
            return null;
        return this.client.stopRun(this.chatId, runId);
    }
    /** Detaches: no callback after this; the run goes on at tether; {@link done} resolves `null`. */
    close() {
        if (this.closed)
            return;
        this.closed = true;
        this.conn?.ac.abort();
        this.wake?.();
        this.settle();
        this.resolve(null);
    }
    // ---- internals ----
    add(list, fn) {
        list.push(fn);
        return () => {
            const i = list.indexOf(fn);
            if (i >= 0)
                list.splice(i, 1);
        };
    }
    emit(list, ...args) {
        for (const fn of list.slice()) {
            if (this.closed)
                return;
            try {
                fn(...args);
            }
            catch (e) {
                // A listener's bug must not break the stream; report it like an uncaught error.
                setTimeout(() => {
                    throw e;
                });
            }
        }
    }
    setState(s, detail = {}) {
        if (this.closed)
            return;
        if (s === this._state && s !== "reconnecting")
            return;
        this._state = s;
        this.emit(this.stateListeners, s, { run_id: this.runId, ...detail });
    }
    learnRun(id) {
        this.runId = id;
        const w = this.runIdWaiters;
        this.runIdWaiters = [];
        w.forEach((r) => r(id));
    }
    settle() {
        this.finished = true;
        this.client.visibility?.removeEventListener("visibilitychange", this.onVisible);
        this.client.online?.removeEventListener("online", this.onOnline);
        const w = this.runIdWaiters;
        this.runIdWaiters = [];
        w.forEach((r) => r(null));
    }
    visible() {
        if (this.client.visibility?.visibilityState !== "visible")
            return;
        const c = this.conn;
        if (c && this._state !== "reconnecting" && Date.now() - c.lastRead >= this.opts.staleMs) {
            // The tab was hidden: its connection may have died silently. Resume from the cursor.
            c.reattach = true;
            c.ac.abort();
        }
        this.wakeNow();
    }
    wakeNow() {
        this.wake?.();
    }
    sleep(ms) {
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
    async loop(first) {
        let req = first;
        let reconnecting = false;
        let fruitless = 0;
        for (;;) {
            const conn = { ac: new AbortController(), progressed: false, reattach: false, lastRead: Date.now() };
            this.conn = conn;
            let outcome;
            try {
                outcome = await this.connect(req, conn);
            }
            catch (e) {
                outcome = { kind: "lost", error: new TetherError("network", String(e?.message ?? e), { recoverable: true, cause: e }) };
            }
            finally {
                conn.ac.abort();
                this.conn = null;
            }
            if (this.closed)
                return;
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
            if (conn.progressed)
                fruitless = 0;
            else if (reconnecting && !conn.reattach)
                fruitless++;
            if (fruitless >= this.opts.maxAttempts) {
                const err = new TetherError("retries_exhausted", `no progress after ${fruitless} reconnect attempts: ${outcome.error.message}`, { recoverable: true, cause: outcome.error });
                this.fail(err);
                return;
            }
            req = { kind: "attach" };
            reconnecting = true;
            const delay = conn.reattach ? 0 : backoffDelay(fruitless, this.opts);
            this.setState("reconnecting", { attempt: fruitless + 1, delay_ms: delay, error: outcome.error });
            if (delay > 0)
                await this.sleep(delay);
            if (this.closed)
                return;
        }
    }
    fail(err) {
        err.cursor = this.cursor;
        this.settle();
        this.setState("failed", { error: err });
        this.reject(err);
    }
    async connect(req, conn) {
        const { url, init } = this.client.request(req, this.chatId, this.cursor);
        init.signal = conn.ac.signal;
        const res = await this.client.fetchImpl(url, init);
        if (this.closed)
            return { kind: "closed" };
        if (req.kind === "record") {
            if (!res.ok)
                return { kind: "fatal", error: await errorFrom(res, RETRYABLE_STATUS.has(res.status)) };
            if (!sseResponse(res) || !res.body) {
                return { kind: "fatal", error: new TetherError("not_a_stream", `the record route answered ${res.status} ${res.headers.get("content-type") ?? "without a content type"}, not an event stream`, { status: res.status }) };
            }
            const rid = res.headers.get("x-tether-run-id");
            if (rid && this.runId === null)
                this.learnRun(rid);
        }
        else {
            if (res.status === 204)
                return { kind: "idle" };
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
    async read(body, conn, record) {
        const reader = body.getReader();
        const decoder = new TextDecoder();
        const parser = new SseParser();
        let first = true;
        let settleTimer = setTimeout(() => {
            if (this._state === "synchronizing")
                this.setState("live");
        }, this.opts.settleMs);
        let idleTimer;
        let idled = false;
        const armIdle = () => {
            if (!this.opts.idleTimeoutMs)
                return;
            clearTimeout(idleTimer);
            idleTimer = setTimeout(() => {
                idled = true;
                conn.ac.abort();
            }, this.opts.idleTimeoutMs);
        };
        armIdle();
        try {
            for (;;) {
                let chunk;
                try {
                    chunk = await reader.read();
                }
                catch (e) {
                    if (this.closed)
                        return { kind: "closed" };
                    const why = idled ? `no data for ${this.opts.idleTimeoutMs} ms` : conn.reattach ? "re-attaching" : String(e?.message ?? e);
                    return { kind: "lost", error: new TetherError("network", `the stream was cut: ${why}`, { recoverable: true, cause: e }) };
                }
                if (this.closed)
                    return { kind: "closed" };
                if (chunk.done) {
                    const tail = decoder.decode();
                    if (tail)
                        parser.push(tail);
                    const partial = parser.pending ? " (an incomplete frame was dropped)" : "";
                    return { kind: "lost", error: new TetherError("stream_lost", `the stream ended without STREAM_END${partial}`, { recoverable: true }) };
                }
                conn.lastRead = Date.now();
                armIdle();
                const frames = parser.push(decoder.decode(chunk.value, { stream: true }));
                let applied = false;
                for (const f of frames) {
                    let j;
                    try {
                        j = JSON.parse(f.data);
                    }
                    catch {
                        if (record && first) {
                            this.unrecorded = true;
                        }
                        else {
                            return { kind: "lost", error: new TetherError("bad_frame", "a frame's data is not JSON", { recoverable: true }) };
                        }
                    }
                    if (first && record && !this.unrecorded && !isFrame(j))
                        this.unrecorded = true;
                    first = false;
                    if (this.unrecorded) {
                        const ev = typeof j === "object" && j !== null && !Array.isArray(j) ? j : { type: "RAW", source: "sse", event: { event: "message", data: f.data } };
                        this.emit(this.eventListeners, ev, { seq: null, run_id: null });
                        applied = true;
                        continue;
                    }
                    if (!isFrame(j))
                        continue; // not a protocol-1 frame: ignored (fields may be added, types too)
                    const r = this.apply(j, conn);
                    if (r === "applied")
                        applied = true;
                    else if (r === "gap") {
                        return { kind: "lost", error: new TetherError("gap", "a frame arrived out of order; resuming from the cursor", { recoverable: true }) };
                    }
                    else if (r !== "skipped")
                        return r;
                }
                if (applied && this._state === "synchronizing") {
                    clearTimeout(settleTimer);
                    settleTimer = undefined;
                    this.setState("live");
                }
            }
        }
        finally {
            clearTimeout(settleTimer);
            clearTimeout(idleTimer);
            reader.cancel().catch(() => { });
        }
    }
    /** Applies one protocol-1 frame. */
    apply(f, conn) {
        switch (f.type) {
            case "STREAM_SNAPSHOT": {
                const events = Array.isArray(f.events) ? f.events : [];
                if (f.run_id !== this.runId)
                    this.learnRun(f.run_id);
                this.seq = f.seq;
                this.resetPending = false;
                conn.progressed = true;
                this.emit(this.resetListeners, events, { run_id: f.run_id, seq: f.seq });
                // The catch-up is applied: the frames after a snapshot are live.
                if (this._state === "synchronizing")
                    this.setState("live");
                return "applied";
            }
            case "STREAM_EVENT": {
                if (f.run_id !== this.runId)
                    return "skipped";
                if (f.seq <= this.seq)
                    return "skipped";
                if (f.seq !== this.seq + 1)
                    return "gap";
                if (this.resetPending) {
                    this.resetPending = false;
                    this.emit(this.resetListeners, [], { run_id: f.run_id, seq: this.seq });
                }
                this.seq = f.seq;
                conn.progressed = true;
                const ev = typeof f.event === "object" && f.event !== null ? f.event : {};
                this.emit(this.eventListeners, ev, { seq: f.seq, run_id: f.run_id });
                return "applied";
            }
            case "STREAM_END": {
                if (f.run_id !== this.runId)
                    return "skipped";
                if (f.seq > this.seq)
                    return "gap";
                conn.progressed = true;
                if (this.resetPending) {
                    this.resetPending = false;
                    this.emit(this.resetListeners, [], { run_id: f.run_id, seq: this.seq });
                }
                // The catch-up reached the end: it was live up to here.
                if (this._state === "synchronizing")
                    this.setState("live");
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
    /** A client; see {@link TetherClientOptions} for the defaults. */
    constructor(options = {}) {
        const g = globalThis;
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
        this.online = options.online !== undefined ? options.online : typeof g.addEventListener === "function" ? globalThis : null;
    }
    /**
     * Records a turn: POSTs `body` (the backend's own fields and the chat id) to the record route
     * with `"protocol": 1`, and follows the run to its end.
     */
    send(body, options = {}) {
        const chatId = body[this.settings.chatIdField];
        if (typeof chatId !== "string")
            throw new TypeError(`send: the body needs a string "${this.settings.chatIdField}"`);
        return new Turn(this, chatId, { kind: "record", body: { ...body, protocol: 1 }, query: options.query }, null);
    }
    /**
     * Attaches to a chat's run: without a cursor, to the running (or unsaved) turn if there is one;
     * with `run_id` (and `after_seq`), resumes from there. Nothing to attach to: state `idle`,
     * `done` resolves `null`.
     */
    attach(req) {
        if (typeof req.chat_id !== "string")
            throw new TypeError("attach: chat_id must be a string");
        const cursor = req.run_id ? { run_id: req.run_id, after_seq: req.after_seq ?? 0 } : null;
        return new Turn(this, req.chat_id, { kind: "attach", wait_ms: req.wait_ms }, cursor);
    }
    /** The status route's answer for a chat, or `null` when it has no run (`204`). */
    async status(chatId) {
        const url = `${this.url(this.settings.statusPath)}?${new URLSearchParams({ chat_id: chatId })}`;
        const res = await this.fetchImpl(url, { method: "GET", headers: this.headers() });
        if (res.status === 204)
            return null;
        if (!res.ok)
            throw await errorFrom(res, RETRYABLE_STATUS.has(res.status));
        return (await res.json());
    }
    /**
     * Asks the stop route to stop a run (`runId`, or the chat's current run). Retries a failed
     * request with the same `cancel_request_id`, so a retry never stops a later run. `null`: no
     * such run (`404`).
     */
    async stopRun(chatId, runId) {
        const body = { [this.settings.chatIdField]: chatId, cancel_request_id: randomId() };
        if (runId)
            body.run_id = runId;
        let last;
        for (let attempt = 0; attempt < 3; attempt++) {
            if (attempt > 0)
                await new Promise((r) => setTimeout(r, 250 * attempt));
            let res;
            try {
                res = await this.fetchImpl(this.url(this.settings.stopPath), {
                    method: "POST",
                    headers: { ...this.headers(), "content-type": "application/json" },
                    body: JSON.stringify(body),
                });
            }
            catch (e) {
                last = e;
                continue;
            }
            if (res.status === 404)
                return null;
            if (res.ok)
                return (await res.json());
            const err = await errorFrom(res, RETRYABLE_STATUS.has(res.status));
            if (!err.recoverable)
                throw err;
            last = err;
        }
        if (last instanceof TetherError)
            throw last;
        throw new TetherError("network", `the stop request failed: ${String(last?.message ?? last)}`, { recoverable: true, cause: last });
    }
    /** @internal */
    fetchImpl(url, init) {
        const f = this.fetchOpt ?? globalThis.fetch;
        return f(url, init);
    }
    /** @internal The HTTP request of a turn's connection. */
    request(req, chatId, cursor) {
        const s = this.settings;
        const headers = { ...this.headers(), accept: "text/event-stream" };
        if (req.kind === "record") {
            let url = this.url(s.recordPath);
            if (req.query && Object.keys(req.query).length) {
                const q = new URLSearchParams();
                for (const [k, v] of Object.entries(req.query))
                    q.set(k, String(v));
                url += `?${q}`;
            }
            headers["content-type"] = "application/json";
            return { url, init: { method: "POST", headers, body: JSON.stringify(req.body) } };
        }
        if (s.attachMethod === "GET") {
            const q = new URLSearchParams({ chat_id: chatId });
            if (!cursor && req.wait_ms)
                q.set("wait_ms", String(req.wait_ms));
            if (cursor)
                headers["last-event-id"] = `${cursor.run_id}:${cursor.after_seq}`;
            return { url: `${this.url(s.livePath)}?${q}`, init: { method: "GET", headers } };
        }
        const body = { [s.chatIdField]: chatId, protocol: 1 };
        if (cursor) {
            body.run_id = cursor.run_id;
            body.after_seq = cursor.after_seq;
        }
        else if (req.wait_ms) {
            body.wait_ms = req.wait_ms;
        }
        headers["content-type"] = "application/json";
        return { url: this.url(s.livePath), init: { method: "POST", headers, body: JSON.stringify(body) } };
    }
    url(path) {
        return this.settings.baseUrl.replace(/\/+$/, "") + path;
    }
    headers() {
        const h = this.headersOpt;
        return { ...(typeof h === "function" ? h() : h) };
    }
}
function randomId() {
    const c = globalThis.crypto;
    if (c?.randomUUID)
        return c.randomUUID();
    return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}
