#!/usr/bin/env bash
# Runs tether's fuzz targets (fuzz/, cargo-fuzz and libFuzzer): installs cargo-fuzz when missing,
# builds every target once, replays the crash reproducers of fuzz/regressions/<target>/, then
# fuzzes each target for SECONDS (default 20) from its committed seeds (fuzz/corpus/<target>/).
# New inputs go to fuzz/target/corpus/<target>/ (not committed); a crash's input goes to
# fuzz/artifacts/<target>/ and fails the run. Copy a minimized one (`cargo fuzz tmin`) to
# fuzz/regressions/<target>/ with the fix.
#
# cargo-fuzz passes -Z flags to rustc: RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
# No sanitizer (`-s none`): the lib forbids unsafe code.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (FUZZ_RELEASE=1: an optimized build)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
shift || true
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(wire sse formats agui_scan request config journal)
fi
target_dir="$PWD/fuzz/target"
triple="$(rustc -vV | sed -n 's/^host: //p')"
# A short run (CI's smoke run) builds without optimizations: the build of tether and Pingora
# with libFuzzer's instrumentation takes a few minutes instead of over twenty, and debug
# assertions stay on. FUZZ_RELEASE=1 builds optimized, for long runs by hand.
if [ "${FUZZ_RELEASE:-}" = 1 ]; then
  profile=(--release); bin="$target_dir/$triple/release"
else
  profile=(--dev); bin="$target_dir/$triple/debug"
fi
(cd fuzz && cargo fuzz build -s none "${profile[@]}" --target-dir "$target_dir")

status=0
for t in "${targets[@]}"; do
  regressions=(fuzz/regressions/"$t"/*)
  if [ -e "${regressions[0]}" ]; then
    echo "== $t: replaying ${#regressions[@]} regression input(s)"
    "$bin/$t" -runs=1 "${regressions[@]}" >"fuzz/target/$t.replay.log" 2>&1 || {
      tail -n 40 "fuzz/target/$t.replay.log"
      echo "FAIL: $t regression replay"
      status=1
    }
  fi
done
[ "$status" -eq 0 ] || exit "$status"

for t in "${targets[@]}"; do
  work="$target_dir/corpus/$t"
  mkdir -p "$work" "fuzz/artifacts/$t" "fuzz/corpus/$t"
  echo "== $t: fuzzing for ${secs}s"
  if "$bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="fuzz/artifacts/$t/" "$work" "fuzz/corpus/$t" >"fuzz/target/$t.log" 2>&1; then
    grep -E '^#[0-9]+.*(DONE|pulse)' "fuzz/target/$t.log" | tail -n 1 || true
    grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' "fuzz/target/$t.log" || true
  else
    tail -n 60 "fuzz/target/$t.log"
    echo "FAIL: $t crashed; its input is in fuzz/artifacts/$t/"
    status=1
  fi
done
exit "$status"
