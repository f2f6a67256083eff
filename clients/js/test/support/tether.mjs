// The real tether binary, a cuttable TCP relay and Chromium's launch settings, for the tests that
// run against them (the browser tests and the agent's end-to-end test).

import { spawn } from "node:child_process";
import net from "node:net";

/** Debian's Chromium, or $CHROMIUM. */
export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** Chromium's flags on this closed network: headless, and none of its background connections. */
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/**
 * Starts the tether binary `bin` in demo mode on free ports, with `extra` arguments after its own
 * (`--tls-cert`/`--tls-key` for HTTPS) and `env` added to its environment (`TETHER_*`
 * variables); resolves with its process, its proxy address and scheme (`http` or `https`, from
 * its banner) and its admin listener's `host:port`.
 */
export function startTether(bin, extra = [], env = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--drain-timeout", "1s", ...extra], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn", ...env },
    });
    let out = "";
    const timer = setTimeout(() => reject(new Error(`tether did not start: ${out}`)), 30_000);
    p.on("error", (e) => reject(new Error(`cannot run ${bin} (cargo build first): ${e.message}`)));
    p.on("exit", (code) => reject(new Error(`tether exited with ${code}: ${out}`)));
    p.stdout.on("data", (d) => {
      out += d;
      const m = /tether on (https?):\/\/([\d.]+):(\d+)\s+\(admin http:\/\/([\d.]+:\d+)\//.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ proc: p, scheme: m[1], host: m[2], port: Number(m[3]), admin: m[4] });
      }
    });
  });
}

/** A TCP relay to `127.0.0.1:targetPort` whose open connections `cut()` resets. */
export function relay(targetPort) {
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}`,
        /** Resets every open connection (both sides), as a dropped network would; returns how many. */
        cut() {
          const n = sockets.size;
          for (const s of sockets) s.resetAndDestroy ? s.resetAndDestroy() : s.destroy();
          return n;
        },
        /** Closes the relay and whatever is still open through it. */
        close() {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(r));
        },
      });
    });
  });
}
