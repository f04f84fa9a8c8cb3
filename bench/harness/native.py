"""Canned native answers for the replica kinds' adapters (``gateway/adapters``), for bench/overhead.py.

Each kind's answer says what the canned OpenAI answer says (the same text, pieces and token counts),
in the backend's own wire format, so a gateway run against a kind measures the adapter's translation
and nothing else. nginx serves them under ``/kinds/<kind>/json/`` and ``/kinds/<kind>/sse/`` (any
path below: the adapters' native routes), and the policies ``policy-kind-<kind>.yaml.tmpl`` point
the bench pools there. TGI and llama.cpp serve chat in their OpenAI mode (their adapters map errors
and names), so their chat answers are the OpenAI ones; Ollama (``/api/chat``, NDJSON) and Triton
(``/v2/models/{m}/generate[_stream]``) translate every answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KINDS = ("tgi", "triton", "ollama", "llamacpp")
"""Kinds with a native adapter; ``openai`` and ``vllm`` send the OpenAI request as it is."""

_CREATED_AT = "2026-12-01T00:00:00.000000Z"


def _openai_answers(
    json_body: Path, sse_body: Path
) -> tuple[str, tuple[int, int], list[str], tuple[int, int]]:
    """(text, (prompt, completion) tokens) of the plain answer; pieces and counts of the stream."""
    plain = json.loads(json_body.read_text())
    text = plain["choices"][0]["message"]["content"]
    usage = (plain["usage"]["prompt_tokens"], plain["usage"]["completion_tokens"])
    pieces: list[str] = []
    stream_usage = usage
    for line in sse_body.read_text().splitlines():
        payload = line.removeprefix("data: ")
        if not line.startswith("data: ") or payload == "[DONE]":
            continue
        event = json.loads(payload)
        for choice in event["choices"]:
            content = choice["delta"].get("content")
            if content:
                pieces.append(content)
        if event.get("usage"):
            stream_usage = (event["usage"]["prompt_tokens"], event["usage"]["completion_tokens"])
    return text, usage, pieces, stream_usage


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"))


def _ollama(
    text: str, usage: tuple[int, int], pieces: list[str], stream_usage: tuple[int, int]
) -> tuple[str, str]:
    def message(content: str, *, done: bool, counts: tuple[int, int] | None = None) -> dict[str, Any]:
        document: dict[str, Any] = {
            "model": "canned",
            "created_at": _CREATED_AT,
            "message": {"role": "assistant", "content": content},
            "done": done,
        }
        if counts is not None:
            document.update(done_reason="stop", prompt_eval_count=counts[0], eval_count=counts[1])
        return document

    plain = _line(message(text, done=True, counts=usage))
    lines = [_line(message(piece, done=False)) for piece in pieces]
    lines.append(_line(message("", done=True, counts=stream_usage)))
    return plain, "\n".join(lines) + "\n"


def _triton(
    text: str, usage: tuple[int, int], pieces: list[str], stream_usage: tuple[int, int]
) -> tuple[str, str]:
    def output(content: str, input_tokens: int, output_tokens: int) -> str:
        return _line(
            {
                "model_name": "canned",
                "model_version": "1",
                "num_input_tokens": input_tokens,
                "num_output_tokens": output_tokens,
                "text_output": content,
            }
        )

    plain = output(text, *usage)
    events = [f"data: {output(piece, stream_usage[0], 1)}\n\n" for piece in pieces]
    return plain, "".join(events)


def native_answers(kind: str, json_body: Path, sse_body: Path) -> tuple[tuple[str, str], tuple[str, str]]:
    """((content type, body) of the plain answer, (content type, body) of the stream) for ``kind``."""
    if kind in ("tgi", "llamacpp"):  # chat is their OpenAI mode
        return ("application/json", json_body.read_text().strip()), (
            "text/event-stream",
            sse_body.read_text(),
        )
    answers = _openai_answers(json_body, sse_body)
    if kind == "ollama":
        plain, stream = _ollama(*answers)
        return ("application/json; charset=utf-8", plain), ("application/x-ndjson", stream)
    if kind == "triton":
        plain, stream = _triton(*answers)
        return ("application/json", plain), ("text/event-stream; charset=utf-8", stream)
    raise ValueError(f"no native answers for kind {kind!r}")
