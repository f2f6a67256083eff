/**
 * An AG-UI agent whose runs go through tether: `TetherAgent` is `@ag-ui/client`'s `HttpAgent`
 * with protocol 1 (docs/protocol.md) underneath, so an AG-UI application (CopilotKit and others)
 * gets recovery by swapping one class. Its runs survive dropped connections, and a page that
 * reloads mid-turn picks the run up again with the library's own `connectAgent()`.
 *
 * `@ag-ui/client` (1.x) and `rxjs` (7.x) are peer dependencies: the application's own copies are
 * used. The frame reader and the reconnect logic are {@link TetherClient}'s.
 *
 * @module
 */

import { HttpAgent, defaultApplyEvents, enforceOutgoingInput } from "@ag-ui/client";
import type { AbstractAgent, AgentSubscriber, BaseEvent, HttpAgentConfig, Message, RunAgentInput, RunAgentParameters, RunAgentResult, State } from "@ag-ui/client";
import { Observable } from "rxjs";

import { TetherClient, TetherError } from "./tether-client.js";
import type { StreamEnd, TetherClientOptions, Turn, UpstreamEvent } from "./tether-client.js";

/** Options of a {@link TetherAgent}: `HttpAgent`'s, plus tether's routes and reconnect tuning. */
export interface TetherAgentConfig extends HttpAgentConfig {
  /** The record route, e.g. `https://chat.example.com/chat` (tether's `POST /chat`). */
  url: string;
  /** The attach route. Default: `url`'s path + `/live`. */
  liveUrl?: string;
  /** The stop route. Default: `url`'s path + `/stop`. */
  stopUrl?: string;
  /** The status route. Default: `url`'s path + `/run`. */
  statusUrl?: string;
  /** The body field that carries the chat id (the thread id). Default `chat_id`. */
  chatIdField?: string;
  /** `abortRun()` also stops the run at tether (`POST /chat/stop`), as aborting a direct request would stop the backend. Default `true`. */
  stopOnAbort?: boolean;
  /** Reconnect tuning and environment hooks, passed to the {@link TetherClient} (routes, headers and fetch come from the agent). */
  client?: Omit<TetherClientOptions, "baseUrl" | "recordPath" | "livePath" | "stopPath" | "statusPath" | "headers" | "fetch" | "chatIdField" | "followSuperseded">;
}

type Mode = { kind: "record"; body: Record<string, unknown> } | { kind: "attach"; wait_ms?: number };

const DELTA_FREE = (e: UpstreamEvent) => {
  const { delta: _delta, ...rest } = e;
  return JSON.stringify(rest);
};

/**
 * The events of `snapshot` (a run's compacted events, docs/protocol.md section 6) that come after
 * `applied` (the events already handed on, in order), or `null` when `applied` is not a prefix of
 * the snapshot's run. Compaction only joins adjacent deltas, so `applied` walks the snapshot event
 * by event, a run of applied deltas covering one merged delta piece by piece; a merged delta the
 * client has only the start of continues with the rest of its text.
 *
 * @internal
 */
export function eventsAfter(applied: readonly UpstreamEvent[], snapshot: readonly UpstreamEvent[]): UpstreamEvent[] | null {
  let j = 0;
  let off = 0;
  for (const a of applied) {
    const s = snapshot[j];
    if (s === undefined) return null;
    if (typeof a.delta === "string" && typeof s.delta === "string" && a.type === s.type) {
      if (off === 0 ? DELTA_FREE(a) !== DELTA_FREE(s) : false) return null;
      if (s.delta.slice(off, off + a.delta.length) !== a.delta) return null;
      off += a.delta.length;
      if (off === s.delta.length) {
        j++;
        off = 0;
      }
      continue;
    }
    if (off !== 0 || JSON.stringify(a) !== JSON.stringify(s)) return null;
    j++;
  }
  const rest = snapshot.slice(j);
  if (off > 0) rest[0] = { ...snapshot[j], delta: (snapshot[j].delta as string).slice(off) };
  return rest;
}

/** Events that open something a later event must find open (the AG-UI verifier's rule), with their closer and key. */
const OPENERS: Record<string, [string, string]> = {
  TEXT_MESSAGE_START: ["TEXT_MESSAGE_END", "messageId"],
  TOOL_CALL_START: ["TOOL_CALL_END", "toolCallId"],
  REASONING_START: ["REASONING_END", "messageId"],
  REASONING_MESSAGE_START: ["REASONING_MESSAGE_END", "messageId"],
  STEP_STARTED: ["STEP_FINISHED", "stepName"],
};
const CLOSERS = new Map(Object.entries(OPENERS).map(([open, [close, key]]) => [close, [open, key] as const]));

/** The openers of `events` still open after them, as `type:id`. */
function openAfter(events: readonly UpstreamEvent[]): Map<string, UpstreamEvent> {
  const open = new Map<string, UpstreamEvent>();
  for (const e of events) {
    const t = String(e.type);
    if (OPENERS[t]) open.set(`${t}:${String(e[OPENERS[t][1]])}`, e);
    const c = CLOSERS.get(t);
    if (c) open.delete(`${c[0]}:${String(e[c[1]])}`);
  }
  return open;
}

/**
 * An AG-UI agent that runs through tether and resumes transparently.
 *
 * ```js
 * import { TetherAgent } from "tether-client/agent";
 * const agent = new TetherAgent({ url: "/chat", threadId: "c1" }); // was: new HttpAgent({ url: "/chat" })
 * agent.addMessage({ id: "u1", role: "user", content: "hi" });
 * await agent.runAgent();      // POST /chat with "protocol": 1 and "chat_id": threadId; resumes across drops
 * await agent.connectAgent();  // after a reload: attach to the thread's in-flight run (nothing to do: resolves at once)
 * ```
 *
 * Each protocol-1 `STREAM_EVENT` is handed to the library's pipeline once, in seq order. A
 * `STREAM_SNAPSHOT` of the same run continues with the events after what was already applied (a
 * merged delta with only its remainder), so `agent.messages` ends exactly as an uninterrupted run
 * would leave it; a snapshot of another run replaces the run's messages and state with a
 * `MESSAGES_SNAPSHOT` and a `STATE_SNAPSHOT` rebuilt by the library's own reducer.
 */
export class TetherAgent extends HttpAgent {
  /** The attach route. */
  liveUrl: string;
  /** The stop route. */
  stopUrl: string;
  /** The status route. */
  statusUrl: string;
  /** The body field of the chat id. */
  chatIdField: string;
  /** Whether `abortRun()` also stops the run at tether. */
  stopOnAbort: boolean;
  /** The reconnect tuning passed to the {@link TetherClient}. */
  clientOptions: NonNullable<TetherAgentConfig["client"]>;
  /** The turn being followed, while a run or connect is active. */
  turn: Turn | null = null;
  /** The last run's `STREAM_END` (`null` before one, or when the run was not recorded to its end). */
  lastEnd: StreamEnd | null = null;

  /** An agent; see {@link TetherAgentConfig}. */
  constructor(config: TetherAgentConfig) {
    super(config);
    // The other routes sit under the record route's path (its query, for the backend, is left out).
    const base = config.url.split("?")[0].replace(/\/+$/, "");
    this.liveUrl = config.liveUrl ?? `${base}/live`;
    this.stopUrl = config.stopUrl ?? `${base}/stop`;
    this.statusUrl = config.statusUrl ?? `${base}/run`;
    this.chatIdField = config.chatIdField ?? "chat_id";
    this.stopOnAbort = config.stopOnAbort ?? true;
    this.clientOptions = { ...(config.client ?? {}) };
  }

  /** A {@link TetherClient} with this agent's routes, headers and fetch. */
  tetherClient(): TetherClient {
    return new TetherClient({
      ...this.clientOptions,
      baseUrl: "",
      recordPath: this.url,
      livePath: this.liveUrl,
      stopPath: this.stopUrl,
      statusPath: this.statusUrl,
      chatIdField: this.chatIdField,
      followSuperseded: false,
      headers: () => ({ ...this.headers }),
      fetch: (url, init) => this.fetch(String(url), init ?? {}),
    });
  }

  /** Records the run at tether and follows it to its `STREAM_END`, across reconnects. */
  override run(input: RunAgentInput): Observable<BaseEvent> {
    return this.follow(input, () => {
      const init = this.requestInit(enforceOutgoingInput(input));
      const body = JSON.parse(String(init.body)) as Record<string, unknown>;
      if (body[this.chatIdField] === undefined) body[this.chatIdField] = input.threadId;
      return { kind: "record", body };
    });
  }

  /** Attaches to the thread's in-flight (or unsaved) run, if any: what `connectAgent()` runs. */
  protected override connect(input: RunAgentInput): Observable<BaseEvent> {
    return this.follow(input, () => ({ kind: "attach" }));
  }

  /**
   * `AbstractAgent.connectAgent`, with a fresh abort controller (as `runAgent` has): after a
   * reload, picks up the thread's in-flight run where tether has it, and resolves at once when
   * there is none.
   */
  override connectAgent(parameters?: RunAgentParameters & { abortController?: AbortController }, subscriber?: AgentSubscriber): Promise<RunAgentResult> {
    this.abortController = parameters?.abortController ?? new AbortController();
    return super.connectAgent(parameters, subscriber);
  }

  override clone(): TetherAgent {
    const cloned = super.clone() as TetherAgent;
    cloned.liveUrl = this.liveUrl;
    cloned.stopUrl = this.stopUrl;
    cloned.statusUrl = this.statusUrl;
    cloned.chatIdField = this.chatIdField;
    cloned.stopOnAbort = this.stopOnAbort;
    cloned.clientOptions = { ...this.clientOptions };
    cloned.turn = null;
    cloned.lastEnd = null;
    return cloned;
  }

  private follow(input: RunAgentInput, mode: () => Mode): Observable<BaseEvent> {
    return new Observable<BaseEvent>((sub) => {
      const baseMessages = structuredClone(this.messages) as Message[];
      const baseState = structuredClone(input.state ?? this.state) as State;
      const signal = this.abortController.signal;
      /** What the pipeline was handed in this run, in order. */
      let applied: UpstreamEvent[] = [];
      let runId: string | null = null;
      let finished = false;
      let chain: Promise<void> = Promise.resolve();
      const enqueue = (fn: () => void | Promise<void>) => {
        chain = chain
          .then(() => (finished ? undefined : fn()))
          .catch((e) => {
            if (finished) return;
            finished = true;
            turn?.close();
            sub.error(e);
          });
      };
      const emit = (events: UpstreamEvent[]) => {
        for (const e of events) {
          applied.push(e);
          sub.next(e as unknown as BaseEvent);
        }
      };

      let turn: Turn | null = null;
      const onAbort = () => {
        const t = turn;
        if (!t || finished) return;
        if (this.stopOnAbort) t.stop().catch(() => {});
        finished = true;
        t.close();
        sub.complete();
      };
      if (signal.aborted) {
        sub.complete();
        return;
      }
      let m: Mode;
      try {
        m = mode();
      } catch (e) {
        sub.error(e);
        return;
      }
      const client = this.tetherClient();
      turn = m.kind === "record" ? client.send(m.body) : client.attach({ chat_id: input.threadId, wait_ms: m.wait_ms });
      this.turn = turn;
      this.lastEnd = null;
      signal.addEventListener("abort", onAbort);

      turn.onEvent((event, meta) =>
        enqueue(() => {
          if (meta.run_id !== null) runId = meta.run_id;
          emit([event]);
        }),
      );
      turn.onReset((events, meta) =>
        enqueue(async () => {
          const same = runId === null || runId === meta.run_id;
          runId = meta.run_id;
          const tail = same ? eventsAfter(applied, events) : null;
          if (tail) {
            emit(tail);
            return;
          }
          // Another run's snapshot (or one that does not extend what was shown): rebuild.
          const out: UpstreamEvent[] = [];
          const stillOpen = openAfter(applied);
          for (const [k, e] of openAfter(events)) if (!stillOpen.has(k)) out.push(e);
          const rebuilt = await reduce(input, baseMessages, baseState, events);
          out.push({ type: "MESSAGES_SNAPSHOT", messages: rebuilt.messages });
          if (JSON.stringify(rebuilt.state) !== JSON.stringify(this.state)) out.push({ type: "STATE_SNAPSHOT", snapshot: rebuilt.state });
          const terminal = events.filter((e) => e.type === "RUN_FINISHED" || e.type === "RUN_ERROR").pop();
          if (terminal) out.push(terminal);
          for (const e of out) sub.next(e as unknown as BaseEvent);
          applied = [...events];
        }),
      );
      turn.done.then(
        (end) =>
          enqueue(() => {
            if (end === null && m.kind === "record") {
              throw new TetherError("run_lost", "tether no longer has this run (204 on re-attach); reload the thread's history", { recoverable: false });
            }
            this.lastEnd = end;
            finished = true;
            sub.complete();
          }),
        (err) =>
          enqueue(() => {
            throw err;
          }),
      );

      return () => {
        signal.removeEventListener("abort", onAbort);
        finished = true;
        turn?.close();
        if (this.turn === turn) this.turn = null;
      };
    });
  }
}

/** `baseMessages` and `baseState` after `events`, by the library's own reducer. */
async function reduce(input: RunAgentInput, baseMessages: Message[], baseState: State, events: UpstreamEvent[]): Promise<{ messages: Message[]; state: State }> {
  const agent = { messages: structuredClone(baseMessages), state: structuredClone(baseState), pendingInterrupts: [] } as unknown as AbstractAgent;
  let messages = agent.messages;
  let state = baseState;
  const source = new Observable<BaseEvent>((s) => {
    for (const e of events) s.next(e as unknown as BaseEvent);
    s.complete();
  });
  await new Promise<void>((resolve, reject) => {
    defaultApplyEvents({ ...input, state: structuredClone(baseState) }, source, agent, []).subscribe({
      next: (mutation) => {
        if (mutation.messages !== undefined) messages = mutation.messages;
        if (mutation.state !== undefined) state = mutation.state;
      },
      error: reject,
      complete: resolve,
    });
  });
  return { messages, state };
}
