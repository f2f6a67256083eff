#!/usr/bin/env python3
"""SDK agreement for tests/fixtures/openai_chat: runs openai-python's own stream over each
fixture and checks what its accumulator builds against the golden <name>.json.

Each <name>.sse is served to the real client (`OpenAI().chat.completions.create(stream=True)`)
through an in-memory transport, so the SDK's own SSE decoder, its `Stream` (which stops at
`[DONE]` and raises `APIError` on an `{"error": ...}` event) and its `ChatCompletionChunk`
parsing are used. Every chunk goes to `ChatCompletionStreamState.handle_chunk`; the accumulated
snapshot (`current_completion_snapshot`, and `get_final_completion()` where the SDK allows it)
is projected onto the golden's shape and compared.

Install and run (from the repository root):
    python3 -m venv .venv-sdk && .venv-sdk/bin/pip install openai
    .venv-sdk/bin/python scripts/sdk/openai_chat.py
Exits non-zero when any fixture differs; the last line is `N passed, N failed`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

try:  # openai-python 3.x ships its own httpx fork
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older SDKs
    import httpx  # type: ignore[no-redef]

import openai
from openai import APIError, OpenAI
from openai._streaming import SSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "openai_chat"


def client_for(body: bytes) -> OpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return OpenAI(
        api_key="sk-fixture",
        base_url="http://fixture.invalid/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def saw_done(body: bytes) -> bool:
    """Whether the SDK's decoder meets `[DONE]` before anything that stops its `Stream`."""
    for sse in SSEDecoder().iter_bytes(iter([body])):
        if sse.data.startswith("[DONE]"):
            return True
        try:
            data = json.loads(sse.data)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("error"):
            return False
    return False


def message(m: Any) -> dict[str, Any]:
    calls = None
    if m.tool_calls is not None:
        calls = [
            {
                "id": t.id,
                "type": t.type,
                "function": {"name": t.function.name, "arguments": t.function.arguments},
            }
            for t in m.tool_calls
        ]
    return {
        "role": m.role,
        "content": m.content,
        "refusal": m.refusal,
        # Not in the SDK's types: an OpenAI-compatible server's extra field, which the SDK's
        # accumulate_delta concatenates like any string and keeps on the model.
        "reasoning_content": getattr(m, "reasoning_content", None),
        "tool_calls": calls,
    }


def choices(completion: Any) -> list[dict[str, Any]]:
    return [
        {
            "index": c.index,
            "finish_reason": c.finish_reason,
            "message": message(c.message),
            "logprobs": c.logprobs.to_dict(mode="json") if c.logprobs is not None else None,
        }
        for c in completion.choices
    ]


def sdk_state(body: bytes) -> dict[str, Any]:
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    errors: list[Any] = []
    seen = 0
    stream = client_for(body).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    try:
        for chunk in stream:
            state.handle_chunk(chunk)
            seen += 1
    except APIError as e:
        errors.append(e.body)
    out: dict[str, Any] = {
        "id": None,
        "model": None,
        "created": None,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": None,
        "choices": [],
        "done": saw_done(body),
        "errors": errors,
        "others": [],
    }
    if seen == 0:
        return out
    snap = state.current_completion_snapshot
    out.update(
        id=snap.id,
        model=snap.model,
        created=snap.created,
        service_tier=snap.service_tier,
        system_fingerprint=snap.system_fingerprint,
        usage=snap.usage.to_dict(mode="json") if snap.usage is not None else None,
        choices=choices(snap),
    )
    # The parsed final completion must say the same; the SDK refuses it for a `length` or
    # `content_filter` finish (LengthFinishReasonError, ContentFilterFinishReasonError).
    try:
        final = state.get_final_completion()
    except openai.OpenAIError:
        final = None
    if final is not None and choices(final) != out["choices"]:
        out["final_completion_choices"] = choices(final)
    return out


def differences(want: Any, got: Any, path: str = "$") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got)):
            if k not in got:
                out.append(f"{path}.{k}: golden has {json.dumps(want[k], ensure_ascii=False)}, SDK nothing")
            elif k not in want:
                out.append(f"{path}.{k}: SDK has {json.dumps(got[k], ensure_ascii=False)}, golden nothing")
            else:
                out.extend(differences(want[k], got[k], f"{path}.{k}"))
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in differences(w, g, f"{path}[{i}]")]
    if want != got or type(want) is not type(got):
        return [
            f"{path}: golden {json.dumps(want, ensure_ascii=False)}, SDK {json.dumps(got, ensure_ascii=False)}"
        ]
    return []


def main() -> int:
    passed = failed = 0
    fixtures = sorted(FIXTURES.glob("*.sse"))
    if not fixtures:
        print(f"no fixtures in {FIXTURES}")
        return 1
    for sse in fixtures:
        golden = json.loads(sse.with_suffix(".json").read_text(encoding="utf-8"))
        try:
            got = sdk_state(sse.read_bytes())
            diffs = differences(golden, got)
        except Exception as e:  # the SDK failing on a fixture is a mismatch too
            diffs = [f"the SDK raised {type(e).__name__}: {e}"]
        if diffs:
            failed += 1
            print(f"FAIL {sse.name}")
            for d in diffs:
                print(f"  {d}")
        else:
            passed += 1
            print(f"ok   {sse.name}")
    print(f"openai {openai.__version__}: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
