#!/usr/bin/env python3
"""SDK agreement for the Anthropic Messages fixtures.

Serves each tests/fixtures/anthropic/<name>.sse, byte for byte, to the official anthropic-sdk-python
client (through an in-process mock transport: no network) and reads it with
`client.messages.stream(...)`: the SDK's own SSE decoder and event dispatch (`_streaming.py`: it
skips `event: ping` and events without an `event:` name, raises on `event: error`) feed each event,
parsed into its `RawMessageStreamEvent` types, to `accumulate_event`
(`lib/streaming/_messages.py`). The accumulated `Message`, whether `message_stop` arrived and the
error the SDK raised are compared with the golden <name>.json that tether's reducer produced
(tests/it/formats/anthropic.rs):

- golden `message`: every member must equal the SDK's `Message.to_dict()` member (content blocks:
  text and citations, tool_use input, thinking and signature; stop_reason, stop_sequence, usage);
  members the SDK has beyond the golden must be null;
- golden `stopped`: a `message_stop` event came through the SDK's stream;
- golden `error`: the `error` object of the body of the APIStatusError the SDK raised (or null);
- golden `lifecycle` is tether's own event order and is not compared.

Prints what differs per fixture and one `N passed, N failed` line; exits 1 on any mismatch.

Install and run (from the repository root):
    python3 -m venv .venv-sdk && .venv-sdk/bin/pip install anthropic
    .venv-sdk/bin/python scripts/sdk/anthropic.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# This file is named like the SDK's package: keep its own folder off the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import anthropic  # noqa: E402
from anthropic import _base_client  # noqa: E402

# The SDK's own HTTP library (newer releases ship a fork, `httpx2`); its client type must match.
httpx: Any = getattr(_base_client, "httpx2", None) or getattr(_base_client, "httpx")

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "anthropic"


def run_sdk(body: bytes) -> tuple[dict | None, bool, Any]:
    """Streams `body` through the SDK; returns (accumulated message dict, stopped, error)."""

    def handler(request: Any) -> Any:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = anthropic.Anthropic(
        api_key="sdk-check",
        base_url="http://sdk-check.invalid",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    stopped = False
    error = None
    stream = None
    try:
        with client.messages.stream(
            model="sdk-check",
            max_tokens=1024,
            messages=[{"role": "user", "content": "hi"}],
        ) as stream:
            for event in stream:
                if event.type == "message_stop":
                    stopped = True
    except anthropic.APIStatusError as e:
        body_json = e.body
        error = body_json.get("error") if isinstance(body_json, dict) else body_json
    message = None
    if stream is not None:
        try:
            message = stream.current_message_snapshot.to_dict(mode="json")
        except AssertionError:
            message = None
    return message, stopped, error


def diff(golden: Any, sdk: Any, path: str, out: list[str]) -> None:
    """Appends every difference of `sdk` from `golden` (extra SDK members must be null)."""
    if isinstance(golden, dict) and isinstance(sdk, dict):
        for k, v in golden.items():
            if k not in sdk:
                if v is not None:
                    out.append(f"{path}.{k}: golden {v!r}, the SDK has none")
                continue
            diff(v, sdk[k], f"{path}.{k}", out)
        for k, v in sdk.items():
            if k not in golden and v is not None:
                out.append(f"{path}.{k}: the SDK has {v!r}, golden has none")
    elif isinstance(golden, list) and isinstance(sdk, list):
        if len(golden) != len(sdk):
            out.append(f"{path}: golden has {len(golden)} items, the SDK {len(sdk)}")
        for i, (g, s) in enumerate(zip(golden, sdk)):
            diff(g, s, f"{path}[{i}]", out)
    elif golden != sdk or type(golden) is not type(sdk):
        out.append(f"{path}: golden {golden!r}, the SDK {sdk!r}")


def main() -> int:
    fixtures = sorted(FIXTURES.glob("*.sse"))
    if not fixtures:
        print(f"no fixtures under {FIXTURES}", file=sys.stderr)
        return 1
    passed = failed = 0
    for sse in fixtures:
        golden = json.loads(sse.with_suffix(".json").read_text(encoding="utf-8"))
        message, stopped, error = run_sdk(sse.read_bytes())
        out: list[str] = []
        diff(golden["message"], message, "message", out)
        if golden["stopped"] != stopped:
            out.append(f"stopped: golden {golden['stopped']}, the SDK {stopped}")
        diff(golden["error"], error, "error", out)
        if out:
            failed += 1
            print(f"FAIL {sse.name}")
            for line in out:
                print(f"  {line}")
        else:
            passed += 1
            print(f"ok   {sse.name}")
    print(f"anthropic-sdk-python {anthropic.__version__}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
