#!/usr/bin/env bash
# Runs every test of tether. Installs the build prerequisites first when they are missing
# (cmake: Pingora's zlib-ng build needs it; a C compiler for zstd), so it works on a fresh machine.
# Then the SDK agreement checks: the official SDKs' accumulators over the golden fixtures
# (scripts/sdk/check.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v cc >/dev/null 2>&1 || need+=(build-essential)
if ((${#need[@]})); then
  echo "installing build prerequisites: ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo test --all-targets "$@"
bash scripts/sdk/check.sh
