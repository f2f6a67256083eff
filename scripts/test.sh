#!/usr/bin/env bash
# Runs every test of tether: cargo's (unit, property, integration), the SDK agreement checks (the
# official SDKs' stream accumulators over the golden fixtures, scripts/sdk/check.sh), the drop-in
# profiles with the real client libraries (scripts/compat: the AI SDK from Node and its React
# `useChat` in Chromium, eventsource, the LangGraph SDK, the OpenAI SDK), then the browser client's
# unit tests (node's test runner, clients/js/test/unit) and the demo page (also over HTTPS with
# HTTP/2, with a certificate made by the openssl CLI) and the AG-UI agent in a real browser
# (Debian's Chromium driven by playwright-core, clients/js/test/browser), all against the debug
# `tether` binary.
# Installs what is missing first, so it works on a fresh machine: cmake and a C compiler (Pingora's
# zlib-ng build needs cmake; zstd needs a C compiler), Node.js and npm, Chromium, openssl (the
# HTTPS browser test's certificate) and curl (tests/it/https.rs drives `curl --http2`), the client's
# npm packages (`npm ci`), the Python and npm SDKs of the checks, the client libraries of the
# drop-in profile tests (scripts/compat, `npm ci`), redis-server (the shared journal's
# integration tests start their own) and nginx (tests/it/deploy/ starts its own in front of two
# replicas; installed without starting the system service). Extra arguments go to
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_updated=""
apt_install() {
  echo "installing: $*"
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null 2>&1 || need+=(chromium)
command -v "${OPENSSL:-/usr/bin/openssl}" >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
# tests/it/journal/ starts its own redis-server (Debian's, 7.x) on a free port, and its own
# three-node Redis Cluster of them (CLUSTER ADDSLOTSRANGE and --cluster-port need Redis 7).
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ((${#need[@]})); then apt_install "${need[@]}"; fi
# tests/it/deploy/ starts Debian's nginx (/usr/sbin/nginx, not on a user's PATH) itself, on a free
# port with deploy/nginx.conf. The package's postinst would start the system service on port 80:
# a policy-rc.d answering 101 (as in a container image) refuses that for the install, and on
# systemd the unit the package enables is disabled (and stopped, should it run anyway).
if [ ! -x /usr/sbin/nginx ]; then
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    guard=1
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
  fi
  apt_install nginx
  if [ -n "$guard" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
  if [ -d /run/systemd/system ]; then $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true; fi
fi

# 1. Rust: unit, property and integration tests; the SDK agreement checks; then the binary the
#    browser test starts.
cargo test --all-targets "$@"
bash scripts/sdk/check.sh
cargo build --bin tether
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac

# 2. The drop-in profiles (conf/profiles/) with the real client libraries: the AI SDK (ai 7, and
#    ai 5 by the alias ai-v5), the eventsource polyfill, the LangGraph SDK, the OpenAI SDK and the
#    Durable Streams client each resume a cut turn by their own means through the binary, in front
#    of a scripted backend of their family; and the AI SDK's React `useChat({resume: true})` (@ai-sdk/react 4 and 2) in a
#    page bundled with esbuild, in Chromium driven by playwright-core, in front of an AI SDK
#    backend (`streamText` on the SDK's mock model): a reload mid-turn, two tabs, Stop, a reload
#    after the end. Accounting: the OpenAI SDK streams a chat completion with
#    `stream_options.include_usage` through a record route, is cut mid-turn, and the status route
#    then answers the provider's usage. The packages come from the lockfile (`npm ci`), again when the installed ones
#    no longer match it.
if ! (cd scripts/compat && [ -d node_modules ] && npm ls --all >/dev/null 2>&1); then
  (cd scripts/compat && npm ci --no-audit --no-fund --loglevel=error)
fi
TETHER_BIN="$target/debug/tether" node --test scripts/compat/*.test.mjs

# 3. The browser client: its dev dependencies (typescript, playwright-core, esbuild) from the
#    lockfile, then its unit tests (golden protocol-1 streams; dist/ must be the build of src/).
cd clients/js
npm ci --no-audit --no-fund --loglevel=error
node --test test/unit/*.test.mjs

# 4. The demo page (over plain HTTP, and over HTTPS with HTTP/2), and the AG-UI agent in a page
#    script bundled with esbuild, in Chromium against target/debug/tether in demo mode (free ports,
#    stopped by PID at the end). Screenshots go to target/browser-artifacts/.
TETHER_BIN="$target/debug/tether" TETHER_ARTIFACTS="$target/browser-artifacts" \
  node --test test/browser/*.test.mjs
echo "browser screenshots: $target/browser-artifacts/"
