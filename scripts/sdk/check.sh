#!/usr/bin/env bash
# SDK agreement: the official SDKs' own stream accumulators (openai-python, anthropic-sdk-python,
# the `ai` package's readUIMessageStream) run over tests/fixtures/<format>/*.sse, and each must
# build the state the golden <name>.json records, the same state tether's tests reduce tether's
# snapshots to. Installs the SDKs when missing: a Python venv under target/sdk-venv (PyPI) and
# node_modules here (npm).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/sdk-venv"
if ! "$venv/bin/python" -c 'import openai, anthropic' 2>/dev/null; then
  echo "installing the Python SDKs into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
fi
if [ ! -d "$here/node_modules/ai" ]; then
  echo "installing the ai package"
  (cd "$here" && npm ci --silent --no-audit --no-fund)
fi
status=0
for script in "$here"/*.py; do
  echo "== $(basename "$script")"
  "$venv/bin/python" "$script" || status=1
done
for script in "$here"/*.mjs; do
  echo "== $(basename "$script")"
  node "$script" || status=1
done
exit "$status"
