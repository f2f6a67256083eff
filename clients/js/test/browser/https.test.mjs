// The demo page over HTTPS with HTTP/2 in a real browser (Debian's Chromium, driven by
// playwright-core) against the real tether binary in demo mode with --tls-cert/--tls-key: a CA
// and a localhost certificate made with the openssl CLI in a temp dir, trusted by Chromium
// through --ignore-certificate-errors-spki-list (the certificate's SPKI hash). Cases: a turn
// (page, script and stream over h2), eight tabs of one browser context streaming eight chats at
// the same time over far fewer than eight connections (over HTTP/1.1 Chromium opens at most six
// per origin, so the seventh stream would wait for one of the first six to end), and a reload
// mid-turn. Each turn must end with exactly the text of an uninterrupted one, shown once.
//
// Needs `target/debug/tether` (cargo build) or TETHER_BIN, /usr/bin/chromium or CHROMIUM, and
// /usr/bin/openssl or OPENSSL.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";
import { CHROMIUM, CHROMIUM_ARGS, startTether } from "../support/tether.mjs";

const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const BIN = process.env.TETHER_BIN ?? join(ROOT, "target/debug/tether");
const OPENSSL = process.env.OPENSSL ?? "/usr/bin/openssl";
const SLOW = 80; // ms between the demo backend's events: a turn of ~55 events takes ~4.4 s
const TABS = 8;

let tmp;
let tether;
let admin;
let base;
let browser;
let ctx;
let uninterrupted; // the assistant text of a turn nobody interrupted

const openssl = (args, input) => execFileSync(OPENSSL, args, { input, stdio: ["pipe", "pipe", "pipe"] });

/** A throwaway CA and a certificate for localhost it signed, in `dir`; the files and the leaf's SPKI hash. */
function makeCertificates(dir) {
  const f = (name) => join(dir, name);
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl(["req", "-x509", ...ec, "-keyout", f("ca-key.pem"), "-out", f("ca.pem"), "-days", "2",
    "-subj", "/CN=tether browser test CA", "-addext", "basicConstraints=critical,CA:TRUE",
    "-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
  openssl(["req", ...ec, "-keyout", f("key.pem"), "-out", f("leaf.csr"), "-subj", "/CN=localhost"]);
  writeFileSync(f("leaf.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" +
    "keyUsage=critical,digitalSignature\nbasicConstraints=critical,CA:FALSE\n");
  openssl(["x509", "-req", "-in", f("leaf.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca-key.pem"),
    "-CAcreateserial", "-days", "2", "-extfile", f("leaf.ext"), "-out", f("cert.pem")]);
  // base64(sha256(SubjectPublicKeyInfo DER)), the form --ignore-certificate-errors-spki-list takes.
  const pub = openssl(["x509", "-in", f("cert.pem"), "-pubkey", "-noout"]);
  const der = openssl(["pkey", "-pubin", "-outform", "der"], pub);
  const hash = openssl(["dgst", "-sha256", "-binary"], der);
  const spki = openssl(["enc", "-base64", "-A"], hash).toString().trim();
  return { cert: f("cert.pem"), key: f("key.pem"), spki };
}

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

/** The page's navigation and resource timing entries: path, protocol, bytes transferred. */
function entries(page) {
  return page.evaluate(() =>
    [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")].map((e) => ({
      type: e.entryType,
      path: new URL(e.name).pathname,
      protocol: e.nextHopProtocol,
      transferred: e.transferSize,
    })),
  );
}

/**
 * Asserts that the page's streams on `streamPath` (at least one) came over HTTP/2, and so did
 * the page itself unless `reloaded` (a reload may take it from the cache) and everything else
 * it fetched over the network (a resource from the cache reports no protocol).
 */
async function assertH2(page, streamPath, reloaded = false) {
  const all = await entries(page);
  const why = JSON.stringify(all);
  const nav = all.find((e) => e.type === "navigation");
  if (!reloaded) assert.equal(nav?.protocol, "h2", `the page: ${why}`);
  const streams = all.filter((e) => e.path === streamPath);
  assert.ok(streams.length > 0, `a ${streamPath} stream: ${why}`);
  for (const e of streams) assert.equal(e.protocol, "h2", `${streamPath}: ${why}`);
  for (const e of all) {
    const fromCache = e.protocol === "" && e.transferred === 0;
    if (!fromCache) assert.equal(e.protocol, "h2", `${e.path}: ${why}`);
  }
}

/** tether's admin /metrics, as a map of sample name to value. */
async function metrics() {
  const body = await (await fetch(`http://${admin}/metrics`)).text();
  const m = new Map();
  for (const line of body.split("\n")) {
    const s = /^(\S+) (\S+)$/.exec(line);
    if (s) m.set(s[1], Number(s[2]));
  }
  return m;
}

/** Polls /metrics until `cond` holds of a scrape; returns that scrape. */
async function scrapeUntil(what, cond, timeout = 20_000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const m = await metrics();
    if (cond(m)) return m;
    if (Date.now() > deadline) throw new Error(`${what}: last scrape ${JSON.stringify([...m].filter(([k]) => k.startsWith("tether_downstream") || k.startsWith("tether_observers")))}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), "tether-https-browser-"));
  const { cert, key, spki } = makeCertificates(tmp);
  const t = await startTether(BIN, ["--tls-cert", cert, "--tls-key", key]);
  tether = t.proc;
  admin = t.admin;
  assert.equal(t.scheme, "https", "the banner names https");
  base = `https://localhost:${t.port}`;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // Trust: the certificate's key, by hash. localhost is 127.0.0.1 (tether does not listen on ::1).
    args: [...CHROMIUM_ARGS, `--ignore-certificate-errors-spki-list=${spki}`, "--host-resolver-rules=MAP localhost 127.0.0.1"],
    headless: true,
  });
  ctx = await browser.newContext();
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

test("a turn over HTTPS: the page, its script and the stream all over HTTP/2", async () => {
  const page = await ctx.newPage();
  await page.goto(`${base}/?chat=h2-first&pace_ms=5`);
  await waitText(page, "state", "idle");
  await send(page);
  await waitText(page, "end", "persisted");
  uninterrupted = await text(page, "assistant");
  assert.match(uninterrupted, /^Recovering a stream means nothing is lost: café 🙂 "quoted" line\n/);
  await assertH2(page, "/chat");
  await page.close();
});

test("eight tabs stream eight chats at the same time over one HTTP/2 connection", async () => {
  assert.ok(uninterrupted);
  // A context of their own, alone on tether: whatever connection is open belongs to these tabs.
  await ctx.close();
  ctx = await browser.newContext();
  await scrapeUntil("the first context's connections closed", (m) => m.get("tether_downstream_connections") === 0);
  const pages = [];
  for (let i = 0; i < TABS; i++) {
    const page = await ctx.newPage();
    await page.goto(`${base}/?chat=h2-tab-${i}&pace_ms=${SLOW}`);
    await waitText(page, "state", "idle");
    // When the tab first shows text, and when its turn ends (the browser's clock, shared by the tabs).
    await page.evaluate(() => {
      const seen = (window.seen = { text: null, end: null });
      const a = document.querySelector('[data-testid="assistant"]');
      const e = document.querySelector('[data-testid="end"]');
      new MutationObserver(() => {
        if (seen.text === null && a.textContent.length > 0) seen.text = Date.now();
        if (seen.end === null && e.textContent !== "") seen.end = Date.now();
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    pages.push(page);
  }
  for (const page of pages) await send(page);
  // tether follows all eight streams at once: the connections open at that moment carry them.
  const during = await scrapeUntil("eight observers at once", (m) => m.get("tether_observers_active") === TABS);
  const connections = during.get("tether_downstream_connections");
  console.log(`${TABS} streams at once over ${connections} connection(s)`);
  assert.ok(connections >= 1 && connections <= 2, `${TABS} streams over ${connections} connections`);
  await Promise.all(pages.map((p) => waitText(p, "end", "persisted")));

  const seen = await Promise.all(pages.map((p) => p.evaluate(() => window.seen)));
  // Every tab was showing text before any tab's turn ended: all eight progressed concurrently.
  const lastStart = Math.max(...seen.map((s) => s.text));
  const firstEnd = Math.min(...seen.map((s) => s.end));
  console.log(`the last tab showed text ${firstEnd - lastStart} ms before the first turn ended`);
  assert.ok(lastStart < firstEnd, `last tab started at +${lastStart - firstEnd} ms after the first end: ${JSON.stringify(seen)}`);
  for (const [i, page] of pages.entries()) {
    assert.equal(await text(page, "assistant"), uninterrupted, `tab ${i}`);
    assert.equal(await occurrences(page, uninterrupted), 1, `tab ${i}`);
    await assertH2(page, "/chat");
  }
  await Promise.all(pages.map((p) => p.close()));
});

test("a reload mid-turn over HTTP/2 resumes the turn: the same final text, shown once", async () => {
  assert.ok(uninterrupted);
  const page = await ctx.newPage();
  await page.goto(`${base}/?chat=h2-reload&pace_ms=${SLOW}`);
  await waitText(page, "state", "idle");
  await send(page);
  await waitAssistant(page, 30);
  assert.equal(await text(page, "end"), "");
  await page.reload();
  await waitText(page, "end", "persisted");
  assert.equal(await text(page, "assistant"), uninterrupted);
  assert.equal(await occurrences(page, uninterrupted), 1);
  const states = await page.evaluate(() => window.tetherDemo.states);
  assert.deepEqual(states.slice(-3), ["synchronizing", "live", "ended"], String(states));
  // The reloaded page resumed on /chat/live over HTTP/2.
  await assertH2(page, "/chat/live", true);
  await page.close();
});
