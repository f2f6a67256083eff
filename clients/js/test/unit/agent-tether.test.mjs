// TetherAgent against the real tether binary in demo mode (target/debug/tether, or $TETHER_BIN;
// skipped when it is not built): an uninterrupted run, and a run whose connections a TCP relay
// cuts mid-turn, which must end with the same agent.messages as @ag-ui/client's plain HttpAgent
// reading the same demo turn, each text delta applied once.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { HttpAgent } from "@ag-ui/client";

import { TetherAgent } from "../../dist/tether-agent.js";
import { relay as startRelay, startTether } from "../support/tether.mjs";

const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const BIN = process.env.TETHER_BIN ?? join(ROOT, "target/debug/tether");
const skip = existsSync(BIN) ? false : `${BIN} is not built (cargo build --bin tether)`;

let tether;
let base;
let relay;



const USER = [{ id: "u1", role: "user", content: "hi" }];

function deltaCounter() {
  const seen = {};
  let count = 0;
  return {
    seen,
    get count() {
      return count;
    },
    subscriber: {
      onTextMessageContentEvent({ event }) {
        count++;
        seen[event.messageId] = (seen[event.messageId] ?? "") + event.delta;
      },
    },
  };
}

describe("TetherAgent against tether in demo mode", { skip }, () => {
  before(async () => {
    tether = await startTether(BIN);
    base = `http://127.0.0.1:${tether.port}`;
    relay = await startRelay(tether.port);
  });
  after(() => {
    relay?.close();
    tether?.proc.kill();
  });

  /** The demo turn as @ag-ui/client's HttpAgent reads it without protocol 1 (tether relays a legacy request unchanged). */
  async function plainRun(threadId) {
    const agent = new HttpAgent({
      url: `${base}/chat?pace_ms=1`,
      threadId,
      initialMessages: USER,
      // tether needs the chat id; HttpAgent's body has none.
      fetch: (url, init) => fetch(url, { ...init, body: JSON.stringify({ ...JSON.parse(init.body), chat_id: threadId }) }),
    });
    await agent.runAgent();
    return agent.messages;
  }

  test("an uninterrupted run ends as HttpAgent's", async () => {
    const ref = await plainRun("agent-ref-1");
    const agent = new TetherAgent({ url: `${base}/chat?pace_ms=1`, threadId: "agent-1", initialMessages: USER });
    const counter = deltaCounter();
    await agent.runAgent({}, counter.subscriber);
    assert.ok(ref.length >= 2 && ref.some((m) => m.role === "assistant" && m.content));
    assert.deepEqual(agent.messages, ref);
    const assistant = agent.messages.find((m) => m.role === "assistant");
    assert.equal(counter.seen[assistant.id], assistant.content);
    assert.equal(agent.lastEnd.persisted, true);
  });

  test("connections cut mid-turn: the run resumes and ends with the same messages, each delta applied once", async () => {
    const ref = await plainRun("agent-ref-2");
    const agent = new TetherAgent({
      url: `${relay.url}/chat?pace_ms=40`,
      threadId: "agent-2",
      initialMessages: USER,
      client: { initialBackoffMs: 50, maxBackoffMs: 200, visibility: null, online: null },
    });
    const counter = deltaCounter();
    let cuts = 0;
    const states = [];
    const cutter = {
      onRunStartedEvent() {
        agent.turn.onState((s) => states.push(s));
      },
      onTextMessageContentEvent() {
        // Cut every connection twice while the answer streams.
        if ((counter.count === 3 || counter.count === 12) && cuts < 2) {
          cuts++;
          setTimeout(() => relay.cut(), 0);
        }
      },
    };
    agent.subscribe(cutter);
    await agent.runAgent({}, counter.subscriber);
    assert.equal(cuts, 2);
    assert.ok(states.filter((s) => s === "reconnecting").length >= 2, `re-attached after each cut: ${states}`);
    assert.deepEqual(agent.messages, ref);
    const assistant = agent.messages.find((m) => m.role === "assistant");
    assert.equal(counter.seen[assistant.id], assistant.content);
    assert.equal(agent.lastEnd.persisted, true);
  });
});
