"""``TritonAdapter``: the kind, where a request goes (``/generate``, ``/generate_stream``, the model
quoted), a chat rendered in the replica's template, and the paths Triton does not serve refused."""

from __future__ import annotations

import pytest

from gateway.adapters import build_adapter
from gateway.adapters.triton.adapter import TritonAdapter
from gateway.errors import InvalidRequest
from tests.gateway.adapters.triton.wire import (
    ALWAYS,
    CHATML,
    MESSAGES,
    ORIGIN,
    chat_for,
    exchange_for,
    sent_body,
)


def test_the_kind_has_its_health_and_load_pages() -> None:
    adapter = build_adapter("triton")
    assert isinstance(adapter, TritonAdapter)
    assert adapter.health_path == "/v2/health/ready" and adapter.metrics_path == "/metrics"


def test_a_chat_goes_to_generate_with_the_messages_rendered_in_the_replicas_template() -> None:
    exchange = chat_for(max_tokens=16, temperature=0)
    assert exchange.url == ORIGIN + "/v2/models/ensemble/generate" and not exchange.stream
    assert sent_body(exchange) == {
        "text_input": CHATML,
        "max_tokens": 16,
        "top_k": 1,
        "stream": False,
        **ALWAYS,
    }
    llama = exchange_for("/chat/completions", {"messages": MESSAGES, "max_tokens": 8}, template="llama3")
    assert sent_body(llama)["text_input"].startswith("<|begin_of_text|><|start_header_id|>user")


def test_a_stream_goes_to_generate_stream_and_the_model_is_quoted() -> None:
    exchange = chat_for(max_tokens=16, stream=True)
    assert exchange.url == ORIGIN + "/v2/models/ensemble/generate_stream" and exchange.stream
    assert sent_body(exchange)["stream"] is True
    odd = TritonAdapter().exchange(
        "/completions", {"model": "my model", "prompt": "Hi"}, ORIGIN, stream=False
    )
    assert odd is not None and odd.url == ORIGIN + "/v2/models/my%20model/generate"


@pytest.mark.parametrize("path", ["/embeddings", "/responses"])
def test_embeddings_and_responses_are_refused(path: str) -> None:
    with pytest.raises(InvalidRequest, match="chat and text completions only"):
        exchange_for(path, {"input": "x"})
