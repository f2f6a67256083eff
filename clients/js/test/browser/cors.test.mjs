// Pages on another origin (CORS) in a real browser (Debian's Chromium, driven by playwright-core):
// two tiny node http servers on 127.0.0.2 serve a blank page each, one on an origin tether allows
// (TETHER_CORS_ORIGINS, comma-separated) and one on an origin it does not (another port is
// another origin); tether (the real binary, demo mode) listens on 127.0.0.1. From the allowed
// page, `fetch` reads a recorded turn and an attach (body and `x-tether-run-id`, a preflighted
// POST and a GET with Last-Event-ID), a 204 and a status answer, and the browser client imported
// from tether runs a turn; from the other page, and from any page against a tether without
// CORS, each of those fetches rejects, and the blocked turn never reaches the backend.
//
// Needs `target/debug/tether` (cargo build) or TETHER_BIN, and /usr/bin/chromium or CHROMIUM.

import assert from "node:assert/strict";
import http from "node:http";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";
import { CHROMIUM, CHROMIUM_ARGS, startTether } from "../support/tether.mjs";

const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const BIN = process.env.TETHER_BIN ?? join(ROOT, "target/debug/tether");
const PAGE_HOST = "127.0.0.2";

let allowedPage; // { server, origin }
let otherPage;
let tether; // CORS allowing allowedPage's origin
let plain; // no CORS
let browser;

/** A node http server on PAGE_HOST:0 answering every GET with an empty HTML page. */
function pageServer() {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end("<!doctype html><title>another origin</title><p>a page on another origin</p>");
  });
  return new Promise((resolve) => {
    server.listen(0, PAGE_HOST, () => resolve({ server, origin: `http://${PAGE_HOST}:${server.address().port}` }));
  });
}

/** Stops a tether process started by startTether. */
async function stop(t) {
  if (!t || t.proc.exitCode !== null) return;
  t.proc.removeAllListeners("exit");
  const exited = new Promise((r) => t.proc.once("exit", r));
  process.kill(t.proc.pid, "SIGTERM");
  const timer = setTimeout(() => process.kill(t.proc.pid, "SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
}

/** tether's runs started so far (its admin /metrics, every label summed). */
async function runsStarted(t) {
  const body = await (await fetch(`http://${t.admin}/metrics`)).text();
  return body
    .split("\n")
    .filter((l) => l.startsWith("tether_runs_started_total{"))
    .reduce((n, l) => n + Number(l.split(" ").pop()), 0);
}

/** A new page at `origin`. */
async function open(origin) {
  const page = await browser.newPage();
  await page.goto(`${origin}/`);
  return page;
}

/**
 * In the page: a protocol-1 turn on `base` (a preflighted JSON POST), then an attach of its run
 * by cursor (a GET with Last-Event-ID, preflighted too). Each fetch's outcome is its status,
 * run id and body, or the name of the error it rejected with.
 */
function turnAndAttach(page, base, chatId) {
  return page.evaluate(
    async ([base, chatId]) => {
      const read = async (p) => {
        try {
          const res = await p;
          return { status: res.status, runId: res.headers.get("x-tether-run-id"), body: await res.text() };
        } catch (e) {
          return { rejected: e.name };
        }
      };
      const turn = await read(
        fetch(`${base}/chat?pace_ms=2`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ chat_id: chatId, protocol: 1 }),
        }),
      );
      const cursor = `${turn.runId ?? "none"}:0`;
      const attach = await read(fetch(`${base}/chat/live?chat_id=${chatId}`, { headers: { "last-event-id": cursor } }));
      // Simple requests (no preflight): the answer itself must allow the page to read it.
      const nothing = await read(fetch(`${base}/chat/live?chat_id=${chatId}-none`));
      const status = await read(fetch(`${base}/chat/run?chat_id=${chatId}`));
      return { turn, attach, nothing, status };
    },
    [base, chatId],
  );
}

/** The frames' `type`s of an SSE body. */
const types = (body) => [...body.matchAll(/^data: (.*)$/gm)].map((m) => JSON.parse(m[1]).type);

before(async () => {
  allowedPage = await pageServer();
  otherPage = await pageServer();
  // The origins from the environment variable, comma-separated, one that no page uses included.
  const env = { TETHER_CORS_ORIGINS: `https://app.example,${allowedPage.origin}` };
  [tether, plain] = await Promise.all([startTether(BIN, [], env), startTether(BIN)]);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
});

after(async () => {
  await browser?.close();
  await Promise.all([stop(tether), stop(plain)]);
  for (const p of [allowedPage, otherPage]) p?.server.close();
});

test("a page on an allowed origin reads a turn, an attach, a 204 and a status from tether", async () => {
  const base = `http://127.0.0.1:${tether.port}`;
  const page = await open(allowedPage.origin);
  const got = await turnAndAttach(page, base, "cors-allowed");
  assert.equal(got.turn.status, 200, JSON.stringify(got.turn));
  assert.match(got.turn.runId, /^[A-Za-z0-9_-]{22}$/);
  const turnTypes = types(got.turn.body);
  assert.equal(turnTypes[0], "STREAM_SNAPSHOT");
  assert.equal(turnTypes.at(-1), "STREAM_END");
  assert.ok(turnTypes.includes("STREAM_EVENT"));
  assert.match(got.turn.body, /"persisted":true/);
  // The attach by cursor: the same run, every event after seq 0, the end.
  assert.equal(got.attach.status, 200, JSON.stringify(got.attach));
  assert.equal(got.attach.runId, got.turn.runId);
  assert.deepEqual(types(got.attach.body), turnTypes.slice(1));
  assert.deepEqual(got.nothing, { status: 204, runId: null, body: "" });
  assert.equal(got.status.status, 200);
  assert.equal(JSON.parse(got.status.body).run_id, got.turn.runId);
  await page.close();
});

test("the browser client imported from tether runs a turn from a page on an allowed origin", async () => {
  const base = `http://127.0.0.1:${tether.port}`;
  const page = await open(allowedPage.origin);
  const got = await page.evaluate(async (base) => {
    const { TetherClient } = await import(`${base}/_tether/client.js`);
    const client = new TetherClient({ baseUrl: base, recordPath: "/chat?pace_ms=2" });
    const turn = client.send({ chat_id: "cors-client", message: "hi" });
    let events = 0;
    turn.onEvent(() => events++);
    const end = await turn.done;
    return { end, events, runId: turn.run_id };
  }, base);
  assert.equal(got.end.persisted, true, JSON.stringify(got));
  assert.ok(got.events > 10, JSON.stringify(got));
  assert.match(got.runId, /^[A-Za-z0-9_-]{22}$/);
  await page.close();
});

test("a page on an origin tether does not allow cannot read tether, and its turn is never sent", async () => {
  const before = await runsStarted(tether);
  const base = `http://127.0.0.1:${tether.port}`;
  const page = await open(otherPage.origin);
  const got = await turnAndAttach(page, base, "cors-other");
  for (const [what, outcome] of Object.entries(got)) {
    assert.deepEqual(outcome, { rejected: "TypeError" }, what);
  }
  // The preflight refused the POST: the browser never sent it, so no run started.
  assert.equal(await runsStarted(tether), before);
  await page.close();
});

test("without CORS configured, no other origin can read tether", async () => {
  const base = `http://127.0.0.1:${plain.port}`;
  const page = await open(allowedPage.origin);
  const got = await turnAndAttach(page, base, "cors-plain");
  for (const [what, outcome] of Object.entries(got)) {
    assert.deepEqual(outcome, { rejected: "TypeError" }, what);
  }
  assert.equal(await runsStarted(plain), 0);
  await page.close();
});
