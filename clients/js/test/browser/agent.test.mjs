// The AG-UI agent (TetherAgent, dist/tether-agent.js) in a real browser (Debian's Chromium, driven
// by playwright-core) against the real tether binary in demo mode, used as an application would:
// a page script bundled with esbuild at test time (TetherAgent and @ag-ui/client in one IIFE, in a
// temp dir) and served on tether's own origin, so the agent's fetches to /chat and /chat/live are
// same-origin. Cases: a run, a reload mid-run picked up with connectAgent(), and a network cut
// mid-run. Each must end with the agent.messages of @ag-ui/client's plain HttpAgent reading the
// same demo turn in the same browser, every text delta applied once.
//
// Needs `target/debug/tether` (cargo build) or TETHER_BIN, and /usr/bin/chromium or CHROMIUM.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";
import { chromium } from "playwright-core";
import { CHROMIUM, CHROMIUM_ARGS as ARGS, relay, startTether } from "../support/tether.mjs";

const CLIENT = fileURLToPath(new URL("../../", import.meta.url));
const ROOT = join(CLIENT, "../../");
const BIN = process.env.TETHER_BIN ?? join(ROOT, "target/debug/tether");
const SLOW = 60; // ms between the demo backend's events: a turn of ~55 events takes ~3.3 s
const PAGE = "/__agent-test"; // served by page.route, on tether's origin

// The page script: what an application does with the agent, plus what the test reads back.
const ENTRY = `
import { HttpAgent } from "@ag-ui/client";
import { TetherAgent } from "./dist/tether-agent.js";

const USER = [{ id: "u1", role: "user", content: "Tell me about recovery" }];

/** An agent of the thread with a subscriber counting what reaches the pipeline; window.run reads it. */
function track(agent) {
  const run = { agent, seen: {}, deltas: 0, states: [], done: false, error: null, messages: null };
  agent.subscribe({
    onRunStartedEvent() {
      agent.turn?.onState((s) => run.states.push(s));
    },
    onTextMessageContentEvent({ event }) {
      run.deltas++;
      run.seen[event.messageId] = (run.seen[event.messageId] ?? "") + event.delta;
    },
  });
  window.run = run;
  return run;
}

function settle(run, promise) {
  promise.then(
    () => {
      run.messages = structuredClone(run.agent.messages);
      run.done = true;
    },
    (e) => {
      run.error = String(e?.stack ?? e);
      run.done = true;
    },
  );
}

window.agentTest = {
  /** Starts a run of a new thread (not awaited: the test may reload or cut the network meanwhile). */
  start(threadId, url) {
    const run = track(new TetherAgent({ url, threadId, initialMessages: USER }));
    settle(run, run.agent.runAgent());
  },
  /** After a reload: the thread's agent, restored with the history the app keeps, picks the run up. */
  connect(threadId, url) {
    const run = track(new TetherAgent({ url, threadId, initialMessages: USER }));
    settle(run, run.agent.connectAgent());
  },
  /** The same demo turn read by @ag-ui/client's plain HttpAgent (tether relays a non-protocol-1 request unchanged). */
  async reference(threadId, url) {
    const agent = new HttpAgent({
      url,
      threadId,
      initialMessages: USER,
      // tether needs the chat id; HttpAgent's body has none.
      fetch: (u, init) => fetch(u, { ...init, body: JSON.stringify({ ...JSON.parse(init.body), chat_id: threadId }) }),
    });
    await agent.runAgent();
    return agent.messages;
  },
};
`;

let tether;
let base;
let port;
let browser;
let tmp;
let bundle;
let reference; // agent.messages of a plain HttpAgent run of the demo turn, in the browser



/** A page on `origin` (tether's, or the relay's) with the bundled agent script loaded. */
async function agentPage(ctx, origin) {
  const page = await ctx.newPage();
  await page.route(`${origin}${PAGE}`, (route) =>
    route.fulfill({ contentType: "text/html", body: `<!doctype html><title>agent</title><script src="${PAGE}.js"></script>` }),
  );
  await page.route(`${origin}${PAGE}.js`, (route) => route.fulfill({ contentType: "text/javascript", body: bundle }));
  await page.goto(`${origin}${PAGE}`);
  await page.waitForFunction(() => window.agentTest !== undefined);
  return page;
}

/** Waits until the page's run has shown at least `n` characters of text. */
function waitText(page, n) {
  return page.waitForFunction((n) => Object.values(window.run?.seen ?? {}).join("").length >= n, n, { timeout: 30_000 });
}

/** Waits for the page's run to settle and returns what it ended with. */
async function finished(page) {
  await page.waitForFunction(() => window.run?.done === true, null, { timeout: 30_000 });
  return page.evaluate(() => ({
    error: window.run.error,
    messages: window.run.messages,
    seen: window.run.seen,
    states: window.run.states,
    lastEnd: window.run.agent.lastEnd,
  }));
}

/** The run ended with the reference messages, its assistant text applied once. */
function assertSameTurn(run) {
  assert.equal(run.error, null);
  assert.deepEqual(run.messages, reference);
  const assistant = run.messages.filter((m) => m.role === "assistant");
  assert.equal(assistant.length, 1);
  assert.equal(run.seen[assistant[0].id], assistant[0].content, "each delta reached the pipeline once");
  const all = run.messages.map((m) => (typeof m.content === "string" ? m.content : "")).join("\n");
  assert.equal(all.split(assistant[0].content).length - 1, 1, "the text appears once");
  assert.equal(run.lastEnd?.persisted, true);
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), "tether-agent-browser-"));
  const outfile = join(tmp, "agent-page.js");
  await build({
    stdin: { contents: ENTRY, resolveDir: CLIENT, sourcefile: "agent-page.js", loader: "js" },
    bundle: true,
    format: "iife",
    platform: "browser",
    target: "chrome120",
    outfile,
    logLevel: "warning",
  });
  bundle = readFileSync(outfile, "utf8");
  const t = await startTether(BIN);
  tether = t.proc;
  port = t.port;
  base = `http://${t.host}:${t.port}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
  const page = await agentPage(browser, base);
  reference = await page.evaluate(() => window.agentTest.reference("agent-ref", "/chat?pace_ms=1"));
  await page.close();
  const assistant = reference.filter((m) => m.role === "assistant");
  assert.equal(assistant.length, 1, JSON.stringify(reference));
  assert.match(assistant[0].content, /^Recovering a stream means nothing is lost: café 🙂 "quoted" line\n/);
});

after(async () => {
  await browser?.close();
  if (tether && tether.exitCode === null) {
    tether.removeAllListeners("exit");
    const exited = new Promise((r) => tether.once("exit", r));
    process.kill(tether.pid, "SIGTERM");
    const t = setTimeout(() => process.kill(tether.pid, "SIGKILL"), 5_000);
    await exited;
    clearTimeout(t);
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test("agent: runAgent() streams a demo turn and ends with HttpAgent's messages", async () => {
  const page = await agentPage(browser, base);
  await page.evaluate(() => window.agentTest.start("agent-run-1", "/chat?pace_ms=5"));
  const run = await finished(page);
  assertSameTurn(run);
  assert.ok(!run.states.includes("reconnecting"), String(run.states));
  assert.equal(run.states.at(-1), "ended", String(run.states));
  await page.close();
});

test("agent: a reload mid-run, connectAgent() in the new page ends with the same messages, the text once", async () => {
  const page = await agentPage(browser, base);
  const url = `/chat?pace_ms=${SLOW}`;
  await page.evaluate((url) => window.agentTest.start("agent-reload-1", url), url);
  await waitText(page, 30);
  const before = await page.evaluate(() => ({ done: window.run.done, text: Object.values(window.run.seen).join("") }));
  assert.equal(before.done, false, "the run was still going when the page reloaded");
  await page.reload();
  await page.waitForFunction(() => window.agentTest !== undefined && window.run === undefined);
  await page.evaluate((url) => window.agentTest.connect("agent-reload-1", url), url);
  const run = await finished(page);
  assertSameTurn(run);
  const text = run.messages.find((m) => m.role === "assistant").content;
  assert.ok(text.startsWith(before.text) && before.text.length < text.length, "the reload came mid-text");
  await page.close();
});

test("agent: a network cut mid-run, the run re-attaches and ends with the same messages", async () => {
  const r = await relay(port);
  const ctx = await browser.newContext();
  try {
    const page = await agentPage(ctx, r.url);
    await page.evaluate((url) => window.agentTest.start("agent-cut-1", url), `/chat?pace_ms=${SLOW}`);
    await waitText(page, 30);
    assert.ok(r.cut() > 0, "the page had open connections through the relay");
    await page.waitForFunction(() => window.run.states.includes("reconnecting"), null, { timeout: 10_000 });
    assert.equal(await page.evaluate(() => window.run.done), false, "a cut is not an end");
    const run = await finished(page);
    assertSameTurn(run);
    assert.equal(run.states.at(-1), "ended", String(run.states));
  } finally {
    await ctx.close();
    await r.close();
  }
});
