"""The tgi tests' wire: TGI's events as it sends them, the exchange a request makes, and an OpenAI
stream read back."""

from __future__ import annotations

import json
from typing import Any

from gateway.adapters.base import Exchange
from gateway.adapters.tgi import TgiAdapter

ORIGIN = "http://10.0.0.7:8080"
MODEL = "HuggingFaceTB/SmolLM2-360M-Instruct"
MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]


def exchange_for(path: str, body: dict[str, Any], *, stream: bool = False) -> Exchange:
    exchange = TgiAdapter().exchange(path, {"model": MODEL, **body}, ORIGIN, stream=stream)
    assert exchange is not None
    return exchange


def sse(document: Any) -> bytes:
    return b"data:" + json.dumps(document, separators=(",", ":")).encode() + b"\n\n"


def token_event(
    index: int, text: str, *, special: bool = False, last: tuple[str, dict[str, Any]] | None = None
) -> bytes:
    return sse(
        {
            "index": index,
            "token": {"id": 100 + index, "text": text, "logprob": -0.25, "special": special},
            "generated_text": None if last is None else last[0],
            "details": None if last is None else last[1],
        }
    )


def details(reason: str, generated: int, prompt: int = 5) -> dict[str, Any]:
    return {"finish_reason": reason, "generated_tokens": generated, "seed": None, "input_length": prompt}


def openai_events(raw: bytes) -> list[Any]:
    """The ``data:`` payloads of an OpenAI stream, JSON decoded (``[DONE]`` as the string)."""
    assert raw.endswith(b"\n\n")
    events = []
    for event in raw.split(b"\n\n")[:-1]:
        assert event.startswith(b"data: ")
        payload = event[6:]
        events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events


def feed_whole(exchange: Exchange, chunks: list[bytes]) -> tuple[bytes, bytes]:
    stream = exchange.translator.stream()
    return b"".join(stream.feed(c) for c in chunks), stream.end()


LENGTH_STREAM = [
    token_event(1, " blue"),
    token_event(2, ","),
    token_event(3, " and", last=(" blue, and", details("length", 3))),
]


def chat_chunk(content: str | None, reason: str | None = None) -> dict[str, Any]:
    delta = {"role": "assistant", "content": content}
    return {
        "object": "chat.completion.chunk",
        "id": "",
        "created": 1757416402,
        "model": MODEL,
        "system_fingerprint": "3.3.6-native",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        "usage": None,
    }
