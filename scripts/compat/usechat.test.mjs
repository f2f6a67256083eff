// The AI SDK's `useChat({ resume: true })` (`@ai-sdk/react`) in a real browser through tether's
// conf/profiles/ai-sdk.toml: Debian's Chromium, driven by playwright-core, loads a React page
// (usechat-page.jsx, bundled with esbuild at test time and served on tether's own origin) in front
// of an AI SDK backend (ai-sdk-backend.mjs: `streamText` on the SDK's mock model, its UI message
// stream, the chat saved in memory). Run once per SDK major: ai 7 with @ai-sdk/react 4 (current),
// and ai 5 with @ai-sdk/react 2 (the npm aliases `ai-v5`, `ai-sdk-react-v2`); each major's page
// and backend use that major only.
//
// Cases, each asserting the rendered and `window.chatPage` messages and what the backend saw:
// a reload mid-turn (the same assistant message completes once: one step, one reasoning part, one
// text part equal to the model's text, the backend's own saved message; one POST), two tabs on one
// chat (the second opened mid-turn), Stop through the profile's stop route (the backend's request
// is aborted; a reload resumes nothing), two tabs with Stop pressed in the second (the first, whose
// own request tether stops, shows the stopped answer, not an error), and a reload after the end
// (no spinner, no duplicate).
//
// Needs the tether binary (TETHER_BIN or target/debug/tether) and /usr/bin/chromium or CHROMIUM.

import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { build } from "esbuild";
import { chromium } from "playwright-core";

import { CHROMIUM, CHROMIUM_ARGS } from "../../clients/js/test/support/tether.mjs";
import { REASONING, startAiSdkBackend } from "./ai-sdk-backend.mjs";
import { REPO, startTether, words } from "./support.mjs";

const HERE = path.join(REPO, "scripts/compat");
const PAGE = "/__usechat"; // the page and its script, served by page.route on tether's origin
const DELTAS = words(60, 11); // the mock model's text deltas
const CHUNK_MS = 50; // between the mock model's chunks: a turn takes ~3.5 s
const WAIT = { timeout: 20_000 };

const MAJORS = [
  { name: "ai 7", ai: "ai", alias: {} },
  { name: "ai 5", ai: "ai-v5", alias: { ai: "ai-v5", "@ai-sdk/react": "ai-sdk-react-v2" } },
];

let browser;

before(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
});

after(async () => {
  await browser?.close();
});

for (const major of MAJORS) {
  describe(`useChat (${major.name}) through the ai-sdk profile`, { timeout: 90_000 }, () => {
    let backend;
    let tether;
    let bundle;

    before(async () => {
      const ai = await import(major.ai);
      const mock = await import(`${major.ai}/test`);
      const out = await build({
        entryPoints: [path.join(HERE, "usechat-page.jsx")],
        absWorkingDir: HERE,
        alias: major.alias,
        bundle: true,
        write: false,
        format: "iife",
        platform: "browser",
        target: "chrome120",
        jsx: "automatic",
        define: { "process.env.NODE_ENV": '"production"' },
        logLevel: "warning",
      });
      bundle = out.outputFiles[0].text;
      const pkg = (name) => import(`${name}/package.json`, { with: { type: "json" } }).then((m) => m.default.version);
      const react = major.alias["@ai-sdk/react"] ?? "@ai-sdk/react";
      console.log(`${major.name}: ai ${await pkg(major.ai)}, @ai-sdk/react ${await pkg(react)}, react ${await pkg("react")}`);
      backend = await startAiSdkBackend({ ai, mock, deltas: DELTAS, chunkDelayMs: CHUNK_MS });
      tether = await startTether("ai-sdk", backend.port);
    });

    after(async () => {
      await tether?.stop();
      await backend?.close();
    });

    /** A tab on `chat`: the page loads its saved messages and mounts useChat (not awaited further). */
    async function openTab(ctx, chat) {
      const page = await ctx.newPage();
      page.on("pageerror", (e) => console.log(`page error (${major.name}): ${e.message}`));
      await page.route(
        (u) => u.pathname === PAGE || u.pathname === `${PAGE}.js`,
        (route) =>
          new URL(route.request().url()).pathname === PAGE
            ? route.fulfill({
                contentType: "text/html",
                body: `<!doctype html><title>useChat</title><div id="root"></div><script src="${PAGE}.js"></script>`,
              })
            : route.fulfill({ contentType: "text/javascript", body: bundle }),
      );
      await page.goto(`${tether.url}${PAGE}?chat=${encodeURIComponent(chat)}`);
      return page;
    }

    /** Waits for the page's resume-on-mount to be answered and the chat to be ready; its state. */
    async function settled(page) {
      await page.waitForFunction(
        () => window.chatPage?.mounted && window.chatPage.resumes.length > 0 && window.chatPage.status === "ready",
        null,
        WAIT,
      );
      return page.evaluate(() => window.chatPage);
    }

    /** Types and sends a message, then waits until the assistant's text has `chars` characters. */
    async function sendAndWaitText(page, text, chars) {
      await page.fill("#input", text);
      await page.click("#send");
      return midTurn(page, chars);
    }

    async function midTurn(page, chars) {
      await page.waitForFunction(
        (n) => {
          const a = window.chatPage.messages.findLast((m) => m.role === "assistant");
          return (a?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("").length >= n;
        },
        chars,
        WAIT,
      );
      return page.evaluate(() => window.chatPage);
    }

    /** Waits for the turn's end in the page: ready again, with an assistant message after the user's. */
    async function turnEnded(page) {
      await page.waitForFunction(
        () => window.chatPage.status === "ready" && window.chatPage.messages.at(-1)?.role === "assistant",
        null,
        WAIT,
      );
      return page.evaluate(() => window.chatPage);
    }

    /** The assistant message rendered in the DOM: how many there are, and the texts of the first. */
    function rendered(page) {
      return page.evaluate(() => {
        const items = [...document.querySelectorAll('#messages li[data-role="assistant"]')];
        return {
          count: items.length,
          text: [...(items[0]?.querySelectorAll("p.text") ?? [])].map((p) => p.textContent),
          reasoning: [...(items[0]?.querySelectorAll("p.reasoning") ?? [])].map((p) => p.textContent),
          spinner: document.querySelector("#spinner") !== null,
        };
      });
    }

    /** One complete assistant turn, once: [user, assistant], the parts whole and the backend's own. */
    function assertOneCompleteTurn(state, chat) {
      assert.equal(state.error, null);
      assert.deepEqual(state.messages.map((m) => m.role), ["user", "assistant"], "no second assistant message");
      const a = state.messages[1];
      assert.deepEqual(a.parts.map((p) => p.type), ["step-start", "reasoning", "text"], "no duplicated or orphaned part");
      assert.equal(a.parts[2].text, backend.fullText, "the text is the model's, once");
      assert.equal(a.parts[1].text, REASONING.join(""));
      for (const p of a.parts.slice(1)) assert.equal(p.state, "done", `the ${p.type} part ended`);
      const saved = backend.saved(chat);
      assert.equal(saved.length, 2);
      assert.deepEqual(a, saved[1], "the page's assistant message is the one the backend saved");
    }

    test("a reload mid-turn: the same assistant message completes once, one POST", async () => {
      const chat = `${major.ai}-reload-mid`;
      const ctx = await browser.newContext();
      try {
        const page = await openTab(ctx, chat);
        await settled(page);
        const mid = await sendAndWaitText(page, "Tell me about tether.", 20);
        assert.equal(mid.status, "streaming", "the turn was streaming when the page reloaded");
        const resume = page.waitForResponse((r) => r.url().endsWith(`/api/chat/${chat}/stream`), WAIT);
        await page.reload();
        assert.equal((await resume).status(), 200, "tether answered the resume with the turn");
        const state = await turnEnded(page);
        assert.deepEqual(state.resumes, ["stream"]);
        assert.ok(state.statuses.includes("streaming"), String(state.statuses));
        await backend.settled(chat);
        assertOneCompleteTurn(state, chat);
        const midText = mid.messages.at(-1).parts.find((p) => p.type === "text").text;
        assert.ok(midText.length < backend.fullText.length && backend.fullText.startsWith(midText), "the reload came mid-text");
        assert.deepEqual(await rendered(page), {
          count: 1,
          text: [backend.fullText],
          reasoning: [REASONING.join("")],
          spinner: false,
        });
        assert.deepEqual(backend.stats(chat), { posts: 1, aborted: 0, streamAborted: 0, saves: 1 });
      } finally {
        await ctx.close();
      }
    });

    test("two tabs, the second opened mid-turn: both end with the same single assistant message", async () => {
      const chat = `${major.ai}-two-tabs`;
      const ctx = await browser.newContext();
      try {
        const first = await openTab(ctx, chat);
        await settled(first);
        await sendAndWaitText(first, "Tell me about tether.", 20);
        const second = await openTab(ctx, chat);
        await midTurn(second, 1);
        const [a, b] = [await turnEnded(first), await turnEnded(second)];
        await backend.settled(chat);
        assertOneCompleteTurn(a, chat);
        assertOneCompleteTurn(b, chat);
        assert.deepEqual(b.messages, a.messages);
        assert.deepEqual(a.resumes, ["none"], "the first tab mounted before the turn");
        assert.deepEqual(b.resumes, ["stream"], "the second tab resumed the running turn");
        for (const page of [first, second]) assert.equal((await rendered(page)).count, 1);
        assert.deepEqual(backend.stats(chat), { posts: 1, aborted: 0, streamAborted: 0, saves: 1 });
      } finally {
        await ctx.close();
      }
    });

    test("Stop through the profile's stop route: the backend's request is aborted; a reload resumes nothing", async () => {
      const chat = `${major.ai}-stop`;
      const ctx = await browser.newContext();
      try {
        const page = await openTab(ctx, chat);
        await settled(page);
        await sendAndWaitText(page, "Tell me about tether.", 20);
        await page.click("#stop");
        await page.waitForFunction(() => window.chatPage.stopAnswer !== null && window.chatPage.status === "ready", null, WAIT);
        const stopped = await page.evaluate(() => window.chatPage);
        assert.equal(stopped.stopAnswer.status, 200, stopped.stopAnswer.body);
        assert.equal(JSON.parse(stopped.stopAnswer.body).execution_stopped, true, stopped.stopAnswer.body);
        await backend.settled(chat);
        // The request aborted by tether (not left to run), streamText aborted, the partial message saved.
        assert.deepEqual(backend.stats(chat), { posts: 1, aborted: 1, streamAborted: 1, saves: 1 });
        const saved = backend.saved(chat);
        const savedText = saved.at(-1).parts.filter((p) => p.type === "text").map((p) => p.text).join("");
        assert.ok(savedText.length < backend.fullText.length, "the turn stopped before its end");

        const resume = page.waitForResponse((r) => r.url().endsWith(`/api/chat/${chat}/stream`), WAIT);
        await page.reload();
        assert.equal((await resume).status(), 204, "nothing to resume after a stop");
        const state = await settled(page);
        assert.deepEqual(state.resumes, ["none"]);
        assert.ok(!state.statuses.includes("streaming"), String(state.statuses));
        assert.deepEqual(state.messages, saved, "the page shows what the backend saved");
        assert.equal((await rendered(page)).spinner, false);
        assert.equal(backend.stats(chat).posts, 1, "no new turn");
      } finally {
        await ctx.close();
      }
    });

    test("two tabs, Stop in the second: the first shows the stopped answer, not an error", async () => {
      const chat = `${major.ai}-two-tabs-stop`;
      const ctx = await browser.newContext();
      try {
        const first = await openTab(ctx, chat);
        await settled(first);
        await sendAndWaitText(first, "Tell me about tether.", 20);
        const second = await openTab(ctx, chat);
        await midTurn(second, 21);
        await second.click("#stop");
        await second.waitForFunction(() => window.chatPage.stopAnswer !== null && window.chatPage.status === "ready", null, WAIT);
        const stopAnswer = await second.evaluate(() => window.chatPage.stopAnswer);
        assert.equal(stopAnswer.status, 200, stopAnswer.body);
        // The tab that did not press Stop: its own request's stream ends as the SDK's server
        // ends a stopped one (abort, then a clean end), so useChat is ready, not in error.
        await first.waitForFunction(() => window.chatPage.status !== "streaming" && window.chatPage.status !== "submitted", null, WAIT);
        const a = await first.evaluate(() => window.chatPage);
        assert.equal(a.error, null, `no error in the first tab: ${a.error}`);
        assert.equal(a.status, "ready");
        assert.ok(!a.statuses.includes("error"), String(a.statuses));
        assert.deepEqual(a.messages.map((m) => m.role), ["user", "assistant"]);
        const text = a.messages[1].parts.filter((p) => p.type === "text").map((p) => p.text).join("");
        assert.ok(text.length >= 20 && text.length < backend.fullText.length, `the answer so far: ${text.length} characters`);
        assert.ok(backend.fullText.startsWith(text), "the first tab's text is the model's, once");
        await backend.settled(chat);
        assert.deepEqual(backend.stats(chat), { posts: 1, aborted: 1, streamAborted: 1, saves: 1 });
        const saved = backend.saved(chat).at(-1).parts.filter((p) => p.type === "text").map((p) => p.text).join("");
        assert.ok(saved.startsWith(text), "the first tab shows what the backend saved, or less of it");
        const shown = await rendered(first);
        assert.equal(shown.count, 1);
        assert.equal(shown.spinner, false);
        assert.deepEqual(shown.text, [text]);
        const b = await second.evaluate(() => window.chatPage);
        assert.equal(b.error, null, `no error in the second tab: ${b.error}`);
        assert.deepEqual(b.resumes, ["stream"], "the second tab resumed the running turn");
      } finally {
        await ctx.close();
      }
    });

    test("a reload after the end: no spinner, no resume stream, no duplicate", async () => {
      const chat = `${major.ai}-reload-end`;
      const ctx = await browser.newContext();
      try {
        const page = await openTab(ctx, chat);
        await settled(page);
        await sendAndWaitText(page, "Tell me about tether.", 1);
        const ended = await turnEnded(page);
        await backend.settled(chat);
        assertOneCompleteTurn(ended, chat);

        const resume = page.waitForResponse((r) => r.url().endsWith(`/api/chat/${chat}/stream`), WAIT);
        await page.reload();
        assert.equal((await resume).status(), 204, "the turn is over: tether has nothing to resume");
        const state = await settled(page);
        assert.deepEqual(state.resumes, ["none"]);
        assertOneCompleteTurn(state, chat);
        assert.deepEqual(state.messages, ended.messages, "the reloaded chat is the one that ended");
        assert.ok(!state.statuses.includes("streaming"), String(state.statuses));
        // ai 7 asks first and shows `submitted` only for a stream; ai 5 sets `submitted` before asking.
        if (major.ai === "ai") assert.deepEqual(state.statuses, ["ready"], "no spinner at any time");
        assert.deepEqual(await rendered(page), {
          count: 1,
          text: [backend.fullText],
          reasoning: [REASONING.join("")],
          spinner: false,
        });
        assert.equal(backend.stats(chat).posts, 1);
      } finally {
        await ctx.close();
      }
    });
  });
}
