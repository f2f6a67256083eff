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
import { HttpAgent } from "@ag-ui/client";
import type { AgentSubscriber, BaseEvent, HttpAgentConfig, RunAgentInput, RunAgentParameters, RunAgentResult } from "@ag-ui/client";
import { Observable } from "rxjs";
import { TetherClient } from "./tether-client.js";
import type { StreamEnd, TetherClientOptions, Turn } from "./tether-client.js";
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
export declare class TetherAgent extends HttpAgent {
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
    turn: Turn | null;
    /** The last run's `STREAM_END` (`null` before one, or when the run was not recorded to its end). */
    lastEnd: StreamEnd | null;
    /** An agent; see {@link TetherAgentConfig}. */
    constructor(config: TetherAgentConfig);
    /** A {@link TetherClient} with this agent's routes, headers and fetch. */
    tetherClient(): TetherClient;
    /** Records the run at tether and follows it to its `STREAM_END`, across reconnects. */
    run(input: RunAgentInput): Observable<BaseEvent>;
    /** Attaches to the thread's in-flight (or unsaved) run, if any: what `connectAgent()` runs. */
    protected connect(input: RunAgentInput): Observable<BaseEvent>;
    /**
     * `AbstractAgent.connectAgent`, with a fresh abort controller (as `runAgent` has): after a
     * reload, picks up the thread's in-flight run where tether has it, and resolves at once when
     * there is none.
     */
    connectAgent(parameters?: RunAgentParameters & {
        abortController?: AbortController;
    }, subscriber?: AgentSubscriber): Promise<RunAgentResult>;
    clone(): TetherAgent;
    private follow;
}
