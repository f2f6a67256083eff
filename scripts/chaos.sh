#!/usr/bin/env bash
# Runs the exactly-once checker across replicas (tests/it/chaos.rs): three replicas on one
# redis-server, N chats of two owners cut and reconnected at random, under a fault schedule.
# The short profile (every fault kind once, about a minute) runs in CI with the other
# integration tests; --long runs the schedule for 20 minutes (CHAOS_DURATION=5m for another
# length). SEED reruns a seed's answers, fault order and cut points (the timing still varies).
# The last lines are the counts: turns, observers, cuts, faults by kind, outcomes, violations.
#
# Usage: scripts/chaos.sh [--long] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--long" ]; then
  export CHAOS_PROFILE=long
  shift
fi
if [ -n "${1:-}" ]; then
  export SEED="$1"
fi
command -v redis-server >/dev/null 2>&1 || { echo "redis-server is needed (scripts/test.sh installs it)"; exit 1; }
# The checker starts target/debug/tether as its third replica: cargo builds it for the test.
exec cargo test --test it chaos -- --nocapture
