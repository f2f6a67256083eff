// The demo page in a real browser (Debian's Chromium, driven by playwright-core) against the real
// tether binary in demo mode: a turn, a reload mid-turn, two tabs on one turn, a network cut and
// back, and Stop. Each interrupted turn must end with exactly the text of an uninterrupted one,
// shown once.
//
// Needs `target/debug/tether` (cargo build) or TETHER_BIN, and /usr/bin/chromium or CHROMIUM.
// Writes a screenshot of the page mid-recovery to target/browser-artifacts/ (TETHER_ARTIFACTS).

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";
import { CHROMIUM, CHROMIUM_ARGS as ARGS, relay, startTether } from "../support/tether.mjs";

const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const BIN = process.env.TETHER_BIN ?? join(ROOT, "target/debug/tether");
const ARTIFACTS = process.env.TETHER_ARTIFACTS ?? join(ROOT, "target/browser-artifacts");
const SLOW = 60; // ms between the demo backend's events: a turn of ~55 events takes ~3.3 s

let tether;
let base;
let port;
let browser;
let uninterrupted; // the assistant text of a turn nobody interrupted



const text = (page, id) => page.locator(`[data-testid="${id}"]`).textContent();

/** Waits until the element's text is `want`. */
function waitText(page, id, want, timeout = 30_000) {
  return page.waitForFunction(
    ([id, want]) => document.querySelector(`[data-testid="${id}"]`)?.textContent === want,
    [id, want],
    { timeout },
  );
}

/** Waits until the assistant has shown at least `n` characters. */
function waitAssistant(page, n) {
  return page.waitForFunction((n) => (document.querySelector('[data-testid="assistant"]')?.textContent ?? "").length >= n, n, {
    timeout: 30_000,
  });
}

async function send(page, message = "Tell me about recovery") {
  await page.locator('[data-testid="prompt"]').fill(message);
  await page.locator('[data-testid="send"]').click();
}

/** How often `needle` occurs in the page's text. */
async function occurrences(page, needle) {
  const all = await page.evaluate(() => document.body.textContent);
  return all.split(needle).length - 1;
}

before(async () => {
  const t = await startTether(BIN);
  tether = t.proc;
  port = t.port;
  base = `http://${t.host}:${t.port}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
  mkdirSync(ARTIFACTS, { recursive: true });
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
});

test("a turn streams through tether into the page and ends persisted", async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/?pace_ms=5`);
  assert.match(page.url(), /[?&]chat=demo-/, "a fresh chat id goes into the URL");
  await waitText(page, "state", "idle");
  await send(page);
  assert.equal(await page.locator('[data-testid="send"]').isDisabled(), true, "send is disabled while a turn runs");
  await waitText(page, "end", "persisted");
  uninterrupted = await text(page, "assistant");
  assert.match(uninterrupted, /^Recovering a stream means nothing is lost: café 🙂 "quoted" line\n/);
  assert.equal(await text(page, "state"), "ended");
  const states = await page.evaluate(() => window.tetherDemo.states);
  assert.deepEqual(states.slice(-4), ["connecting", "synchronizing", "live", "ended"]);
  assert.equal(await page.locator('[data-testid="send"]').isDisabled(), false);
  await page.close();
});

test("a reload mid-turn resumes the turn: the same final text, shown once", async () => {
  assert.ok(uninterrupted);
  const page = await browser.newPage();
  await page.goto(`${base}/?chat=reload-1&pace_ms=${SLOW}`);
  await send(page);
  await waitAssistant(page, 30);
  assert.equal(await text(page, "end"), "");
  await page.reload();
  // The reloaded page attaches, catches up from the snapshot and follows the live tail.
  await waitText(page, "end", "persisted");
  assert.equal(await text(page, "assistant"), uninterrupted);
  assert.equal(await occurrences(page, uninterrupted), 1);
  const states = await page.evaluate(() => window.tetherDemo.states);
  assert.deepEqual(states.slice(-3), ["synchronizing", "live", "ended"], String(states));
  await page.close();
});

test("a second tab follows the same turn to the same end", async () => {
  const url = `${base}/?chat=two-tabs-1&pace_ms=${SLOW}`;
  const first = await browser.newPage();
  await first.goto(url);
  await send(first);
  await waitAssistant(first, 10);
  const ctx = await browser.newContext();
  const second = await ctx.newPage();
  await second.goto(url);
  await Promise.all([waitText(first, "end", "persisted"), waitText(second, "end", "persisted")]);
  assert.equal(await text(first, "assistant"), uninterrupted);
  assert.equal(await text(second, "assistant"), uninterrupted);
  assert.equal(await occurrences(second, uninterrupted), 1);
  await first.close();
  await ctx.close();
});

test("a network cut mid-turn: reconnecting, catching up, live, and the uninterrupted text", async () => {
  const r = await relay(port);
  const ctx = await browser.newContext({ viewport: { width: 900, height: 640 } });
  const page = await ctx.newPage();
  try {
    await page.goto(`${r.url}/?chat=cut-1&pace_ms=${SLOW}`);
    await send(page);
    await waitAssistant(page, 30);
    // Offline emulation alone leaves an open response stream alone: also reset the connections.
    await ctx.setOffline(true);
    assert.ok(r.cut() > 0, "the page had open connections through the relay");
    await waitText(page, "state", "reconnecting", 10_000);
    await page.waitForTimeout(700);
    assert.equal(await text(page, "end"), "", "a cut is not an end");
    await page.screenshot({ path: join(ARTIFACTS, "demo-recovering.png") });
    await page.waitForTimeout(800);
    await ctx.setOffline(false);
    await waitText(page, "end", "persisted");
    assert.equal(await text(page, "assistant"), uninterrupted);
    assert.equal(await occurrences(page, uninterrupted), 1);
    const states = await page.evaluate(() => window.tetherDemo.states);
    const cut = states.indexOf("reconnecting");
    assert.ok(cut > 0, String(states));
    assert.deepEqual(states.slice(-3), ["synchronizing", "live", "ended"], String(states));
    await page.screenshot({ path: join(ARTIFACTS, "demo-recovered.png") });
  } finally {
    await ctx.close();
    await r.close();
  }
});

test("Stop ends the turn as cancelled", async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/?chat=stop-1&pace_ms=${SLOW}`);
  await send(page);
  await waitAssistant(page, 10);
  await page.locator('[data-testid="stop"]').click();
  await waitText(page, "end", "cancelled");
  assert.equal(await text(page, "state"), "ended");
  const partial = await text(page, "assistant");
  assert.ok(partial.length < uninterrupted.length && uninterrupted.startsWith(partial), JSON.stringify(partial));
  assert.equal(await page.locator('[data-testid="send"]').isDisabled(), false);
  assert.equal(await page.locator('[data-testid="stop"]').isDisabled(), true);
  await page.close();
});
