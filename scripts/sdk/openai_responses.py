#!/usr/bin/env python3
"""SDK agreement for the OpenAI Responses fixtures.

Serves each tests/fixtures/openai_responses/<name>.sse, byte for byte, to the official openai-python
client (`client.responses.stream(...)` over a mock HTTP transport), so the SDK's own SSE decoder,
event types and accumulator (`openai.lib.streaming.responses._responses.ResponseStreamState`) read
it as they would read the API. Projects what the SDK accumulated onto the shape of the golden
<name>.json (written by tether's reducer in tests/it/formats/openai_responses.rs) and compares:

- text:      per message item and content index, the `output_text` the accumulator built from the
             `response.output_text.delta` events (its snapshot), and the same text as the final
             response repeats it;
- args:      per function-call item, the `arguments` the accumulator built from the deltas, and as
             the final response repeats them;
- summary:   per reasoning item and summary index, the summary text of the final response (the
             accumulator does not build summaries from deltas), else of the snapshot;
- reasoning: per reasoning item and content index, the reasoning text, likewise;
- refusal:   per message item and content index, the refusal text, likewise;
- status:    the `response.status` of the last lifecycle event the SDK yielded.

Exits non-zero on any mismatch; prints what differs and one `N passed, N failed` line at the end.

Needs the SDK: `python3 -m pip install openai` (tested with openai 3.57.0).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

try:
    import httpx2 as httpx  # openai >= 3 ships its own httpx fork
except ImportError:  # pragma: no cover - older SDKs
    import httpx  # type: ignore[no-redef]

import openai
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "openai_responses"
LIFECYCLE = {
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.completed",
    "response.failed",
    "response.incomplete",
}


def client_serving(body: bytes) -> OpenAI:
    """A client whose every request is answered with `body` as an SSE stream."""

    def answer(request: Any) -> Any:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx.Client(transport=httpx.MockTransport(answer))
    return OpenAI(api_key="test", base_url="http://sdk-check.invalid/v1", http_client=http, max_retries=0)


def nonempty(d: dict[str, Any]) -> dict[str, Any]:
    """Drops empty texts and the items left without any."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = {i: t for i, t in v.items() if t}
        if v:
            out[k] = v
    return out


def project(output: list[Any]) -> dict[str, Any]:
    """The golden's text fields of a list of output items (SDK models)."""
    text: dict[str, dict[str, str]] = {}
    refusal: dict[str, dict[str, str]] = {}
    args: dict[str, str] = {}
    summary: dict[str, dict[str, str]] = {}
    reasoning: dict[str, dict[str, str]] = {}
    for item in output:
        if item.type == "message":
            for i, part in enumerate(item.content):
                if part.type == "output_text":
                    text.setdefault(item.id, {})[str(i)] = part.text
                elif part.type == "refusal":
                    refusal.setdefault(item.id, {})[str(i)] = part.refusal
        elif item.type == "function_call":
            args[item.id] = item.arguments
        elif item.type == "reasoning":
            for i, part in enumerate(item.summary or []):
                summary.setdefault(item.id, {})[str(i)] = part.text
            for i, part in enumerate(item.content or []):
                reasoning.setdefault(item.id, {})[str(i)] = part.text
    return {
        "text": nonempty(text),
        "refusal": nonempty(refusal),
        "args": nonempty(args),
        "summary": nonempty(summary),
        "reasoning": nonempty(reasoning),
    }


def run_sdk(body: bytes) -> tuple[dict[str, Any], list[str]]:
    """What the SDK accumulated from `body`, projected onto the golden's shape, and notes."""
    notes: list[str] = []
    client = client_serving(body)
    status = None
    final = None
    with client.responses.stream(model="gpt-5", input="hi") as stream:
        for event in stream:
            if event.type in LIFECYCLE:
                status = event.response.status
                if event.type != "response.created" and event.type != "response.in_progress":
                    final = event.response
        state = stream._state
        # The accumulator's running snapshot (a ParsedResponse built from the deltas).
        snapshot = getattr(state, "_ResponseStreamState__current_snapshot")
        if final is not None and final.status == "completed":
            # What `get_final_response()` returns.
            final = stream.get_final_response()
    accumulated = project(snapshot.output if snapshot is not None else [])
    repeated = project(final.output) if final is not None else None
    got = {
        "status": status,
        # The accumulator builds these two from the deltas.
        "text": accumulated["text"],
        "args": accumulated["args"],
    }
    for k in ("summary", "reasoning", "refusal"):
        got[k] = (repeated or accumulated)[k]
    if repeated is not None:
        for k in ("text", "args"):
            if repeated[k] != accumulated[k]:
                notes.append(f"{k}: final response {repeated[k]!r} != accumulated {accumulated[k]!r}")
    return got, notes


def main() -> int:
    fixtures = sorted(FIXTURES.glob("*.sse"))
    if not fixtures:
        print(f"no fixtures under {FIXTURES}")
        print("0 passed, 1 failed")
        return 1
    print(f"openai-python {openai.__version__}")
    passed = failed = 0
    for sse in fixtures:
        name = sse.stem
        golden = json.loads(sse.with_suffix(".json").read_text(encoding="utf-8"))
        try:
            got, notes = run_sdk(sse.read_bytes())
        except Exception as e:  # the SDK refused the stream
            got, notes = None, [f"the SDK raised {type(e).__name__}: {e}"]
        if got is not None:
            for k, v in got.items():
                want = golden.get(k, {} if k != "status" else None)
                if v != want:
                    notes.append(f"{k}: SDK {v!r} != golden {want!r}")
        if notes:
            failed += 1
            print(f"FAIL {name}")
            for n in notes:
                print(f"  {n}")
        else:
            passed += 1
            print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
