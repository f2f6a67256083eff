// What the drop-in tests share: the tether binary started with a conf/profiles/ profile in front of
// a scripted backend, that backend's HTTP server (it serves one turn route and answers 404 to
// everything else, so a resume that reached it would fail loudly), paced SSE writing, the
// cuttable TCP relay of the browser tests, and the random cut point.

import { spawn } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

export { relay } from "../../clients/js/test/support/tether.mjs";

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const TETHER_BIN = process.env.TETHER_BIN ?? path.join(REPO, "target/debug/tether");

/**
 * Starts `$TETHER_BIN --config conf/profiles/<profile>.toml` (or `profile` itself, a path ending
 * in `.toml`) in front of 127.0.0.1:`upstreamPort` on free ports; resolves once it prints its
 * listening line, with its URL and `stop()` (by PID).
 */
export function startTether(profile, upstreamPort) {
  const config = profile.endsWith(".toml") ? profile : path.join(REPO, "conf/profiles", `${profile}.toml`);
  const args = ["--config", config, "--upstream", `127.0.0.1:${upstreamPort}`];
  args.push("--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--drain-timeout", "1s");
  return new Promise((resolve, reject) => {
    const p = spawn(TETHER_BIN, args, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
    });
    let out = "";
    let err = "";
    p.stderr.on("data", (d) => {
      err += d;
      if (process.env.TETHER_LOG) process.stderr.write(d);
    });
    const timer = setTimeout(() => reject(new Error(`tether did not start: ${out}${err}`)), 30_000);
    p.on("error", (e) => reject(new Error(`cannot run ${TETHER_BIN} (cargo build first): ${e.message}`)));
    p.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`tether exited with ${code} (profile ${profile}): ${out}${err}`));
    });
    p.stdout.on("data", (d) => {
      out += d;
      const m = /tether on http:\/\/([\d.]+):(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({
          url: `http://${m[1]}:${m[2]}`,
          stop() {
            p.removeAllListeners("exit");
            return new Promise((r) => {
              if (p.exitCode !== null || p.signalCode !== null) return r();
              p.once("exit", () => r());
              process.kill(p.pid, "SIGKILL");
            });
          },
        });
      }
    });
  });
}

/**
 * A scripted backend on 127.0.0.1:0. `handler(req, res, url, body)` returns true when it served
 * the request; anything it does not serve gets 404. Every request is logged in `requests`
 * (`"METHOD /path?query"`).
 */
export async function startBackend(handler) {
  const requests = [];
  const server = http.createServer(async (req, res) => {
    requests.push(`${req.method} ${req.url}`);
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString("utf8");
    let body;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = undefined;
    }
    const url = new URL(req.url, "http://backend");
    if (!(await handler(req, res, url, body))) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "not_found", path: url.pathname }));
    }
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: server.address().port,
    requests,
    close() {
      server.closeAllConnections();
      return new Promise((r) => server.close(r));
    },
  };
}

/**
 * Writes `frames` (complete SSE blocks, each ending in a blank line) after the response head,
 * one every `paceMs`, and ends the response. Resolves when the last byte is written; a client
 * (tether) that goes away stops it early.
 */
export async function writePaced(res, status, headers, frames, paceMs) {
  res.writeHead(status, headers);
  res.flushHeaders();
  for (const f of frames) {
    if (res.destroyed) return;
    res.write(f);
    await new Promise((r) => setTimeout(r, paceMs));
  }
  res.end();
}

/**
 * A random frame count in [lo, hi] after which the first connection is cut; printed so that a
 * failing run can be reproduced with COMPAT_CUT=<n>.
 */
export function cutPoint(lo, hi, label) {
  const n = process.env.COMPAT_CUT ? Number(process.env.COMPAT_CUT) : lo + Math.floor(Math.random() * (hi - lo + 1));
  console.log(`# ${label}: cutting the first connection after ${n} frames (COMPAT_CUT=${n} repeats it)`);
  return n;
}

/** Lorem-ipsum-ish words for the scripted turns' text deltas. */
export function words(n, seed = 1) {
  const vocab = ["tether", "keeps", "the", "upstream", "alive", "while", "browser", "reconnects", "and",
    "replays", "every", "frame", "once", "in", "order", "ünïcödé", "✓", "\"quoted\"", "line\nbreak"];
  const out = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(vocab[x % vocab.length] + " ");
  }
  return out;
}
