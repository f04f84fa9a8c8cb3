"""``OllamaAdapter``: the kind, where each OpenAI path goes (``/api/chat``, ``/api/generate``,
``/api/embed``, refused) with ``stream`` always explicit, and ``/api/ps`` read as the load."""

from __future__ import annotations

import pytest

from gateway.adapters import ReplicaLoad, build_adapter
from gateway.adapters.ollama.adapter import OllamaAdapter
from gateway.errors import InvalidRequest
from tests.gateway.adapters.ollama.wire import MODEL, ORIGIN, SEA, chat_for, exchange_for, recorded, sent_body


def test_the_kind_names_its_adapter_health_and_load_pages() -> None:
    adapter = build_adapter("ollama")
    assert isinstance(adapter, OllamaAdapter) and adapter.kind == "ollama"
    assert adapter.health_path == "/api/version" and adapter.metrics_path == "/api/ps"


def test_chat_goes_to_api_chat_with_stream_always_explicit() -> None:
    for stream in (False, True):
        exchange = chat_for(stream, max_tokens=16, temperature=0)
        assert exchange.url == ORIGIN + "/api/chat" and exchange.stream is stream
        assert sent_body(exchange) == {
            "model": MODEL,
            "messages": SEA,
            "stream": stream,
            "options": {"temperature": 0, "top_p": 1.0, "num_predict": 16},
        }


def test_completions_go_to_api_generate_raw_with_openais_default_length() -> None:
    exchange = exchange_for("/completions", True, prompt="The three primary colours are", temperature=0)
    assert exchange.url == ORIGIN + "/api/generate" and exchange.stream
    assert sent_body(exchange) == {
        "model": MODEL,
        "prompt": "The three primary colours are",
        "raw": True,
        "stream": True,
        "options": {"temperature": 0, "top_p": 1.0, "num_predict": 16},
    }
    assert sent_body(exchange_for("/completions", prompt=["Once"], max_tokens=3))["prompt"] == "Once"
    assert sent_body(exchange_for("/completions", prompt=None))["prompt"] == ""
    assert sent_body(exchange_for("/completions", prompt="a", max_tokens=3, stop="b", echo=False, suffix=""))[
        "options"
    ] == {"temperature": 1.0, "top_p": 1.0, "stop": ["b"], "num_predict": 3}


def test_embeddings_go_to_api_embed_unstreamed_and_never_truncated() -> None:
    exchange = exchange_for(
        "/embeddings", True, input="Why is the sky blue?", encoding_format="float", user="u"
    )
    assert exchange.url == ORIGIN + "/api/embed" and exchange.stream is False
    assert sent_body(exchange) == {"model": MODEL, "input": ["Why is the sky blue?"], "truncate": False}
    sent = sent_body(exchange_for("/embeddings", input=["a", "b"], dimensions=128))
    assert sent == {"model": MODEL, "input": ["a", "b"], "truncate": False, "dimensions": 128}


def test_the_responses_api_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        exchange_for("/responses", input="hi")
    assert caught.value.status == 400 and "/responses" in caught.value.message


# ---- load ----


def test_api_ps_reads_as_load() -> None:
    adapter = OllamaAdapter()
    assert adapter.parse_load(recorded("ps")) == ReplicaLoad(
        num_waiting=0.0, num_running=0.0, kv_cache_usage=0.0
    )
    cold = ReplicaLoad(num_waiting=1.0, num_running=0.0, kv_cache_usage=0.0)
    assert adapter.parse_load(recorded("ps_nothing_loaded")) == cold
    assert adapter.parse_load(b'{"models": null}') == cold


@pytest.mark.parametrize(
    "page", [b"", b"# HELP vllm:num_requests_waiting\n", b"[]", b'{"version": "0.12.6"}', b'{"models": {}}']
)
def test_a_page_that_is_not_api_ps_states_no_load(page: bytes) -> None:
    assert OllamaAdapter().parse_load(page) is None
