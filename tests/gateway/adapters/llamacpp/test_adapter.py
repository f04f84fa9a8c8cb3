"""``LlamaCppAdapter``: the kind and its pages, and where each OpenAI path goes (the native
``/completion``, the OpenAI mode, ``/responses`` in OpenAI mode)."""

from __future__ import annotations

import pytest

from gateway.adapters import build_adapter
from gateway.adapters.llamacpp import LlamaCppAdapter
from tests.gateway.adapters.llamacpp.wire import MODEL, ORIGIN, exchange_for, sent_body


def test_the_kind_and_its_pages() -> None:
    adapter = build_adapter("llamacpp")
    assert isinstance(adapter, LlamaCppAdapter)
    assert (adapter.kind, adapter.health_path, adapter.metrics_path) == ("llamacpp", "/health", "/slots")


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_chat_and_embeddings_go_to_its_openai_mode_unchanged(path: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": True, "max_tokens": 4}
    exchange = exchange_for(path, body, stream=path == "/chat/completions")
    assert exchange.url == ORIGIN + "/v1" + path
    assert sent_body(exchange) == {"model": MODEL, **body}


def test_responses_are_sent_in_openai_mode() -> None:
    assert (
        LlamaCppAdapter().exchange("/responses", {"model": MODEL, "input": "hi"}, ORIGIN, stream=False)
        is None
    )
