#!/usr/bin/env bash
# Builds and runs tether. Without --upstream it serves its embedded demo backend and prints the
# curl commands of a turn, a client killed mid-turn, and its recovery. Extra flags pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cmake >/dev/null 2>&1; then
  echo "installing cmake (Pingora's zlib-ng build needs it)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq cmake build-essential >/dev/null
fi
exec cargo run --release --bin tether -- "$@"
