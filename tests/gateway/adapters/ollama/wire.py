"""The ollama tests' wire: Ollama's recorded answers (``tests/backends_compat/wire/ollama.json``), the
exchange a request makes and the body it sends."""

from __future__ import annotations

import json
from typing import Any

from gateway.adapters import Exchange
from gateway.adapters.ollama import OllamaAdapter
from tests.support.wire_fake import load_transcript

ORIGIN = "http://ollama:11434"
MODEL = "llama3.2:1b"
SEA = [{"role": "user", "content": "Write one sentence about the sea."}]
TRANSCRIPT = load_transcript("ollama")


def recorded_response(name: str) -> dict[str, Any]:
    exchange: dict[str, Any] = next(e for e in TRANSCRIPT["exchanges"] if e["name"] == name)
    return exchange["response"]


def recorded(name: str) -> bytes:
    return "".join(recorded_response(name)["chunks"]).encode()


def exchange_for(path: str, stream: bool = False, **body: Any) -> Exchange:
    exchange = OllamaAdapter().exchange(path, {"model": MODEL, **body}, ORIGIN, stream=stream)
    assert exchange is not None
    return exchange


def chat_for(stream: bool = False, **body: Any) -> Exchange:
    return exchange_for("/chat/completions", stream, **{"messages": SEA, **body})


def sent_body(exchange: Exchange) -> Any:
    return json.loads(exchange.body)
