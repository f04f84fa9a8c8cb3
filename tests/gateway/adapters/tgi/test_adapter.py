"""``TgiAdapter``: the kind, where each OpenAI path goes (``/generate_stream``, the Messages API, refused),
and ``/metrics`` read as a ``ReplicaLoad``."""

from __future__ import annotations

import json

import pytest

from gateway.adapters import build_adapter
from gateway.adapters.tgi.adapter import TgiAdapter, parse_tgi_metrics
from gateway.errors import InvalidRequest
from tests.gateway.adapters.tgi.wire import MESSAGES, MODEL, ORIGIN, exchange_for


def test_the_kind_has_its_health_and_load_pages() -> None:
    adapter = build_adapter("tgi")
    assert isinstance(adapter, TgiAdapter)
    assert (adapter.kind, adapter.health_path, adapter.metrics_path) == ("tgi", "/health", "/metrics")


def test_a_completion_goes_to_generate_stream_plain_or_streamed() -> None:
    for stream in (False, True):
        exchange = exchange_for("/completions", {"prompt": "The sky is", "max_tokens": 8}, stream=stream)
        assert exchange.url == ORIGIN + "/generate_stream"
        assert exchange.stream is stream
        assert json.loads(exchange.body) == {
            "inputs": "The sky is",
            "parameters": {
                "max_new_tokens": 8,
                "details": True,
                "return_full_text": False,
                "do_sample": True,
                "adapter_id": MODEL,
            },
        }


def test_a_chat_goes_to_the_messages_api_nearly_as_it_is() -> None:
    exchange = exchange_for("/chat/completions", {"messages": MESSAGES, "max_tokens": 16}, stream=True)
    assert exchange.url == ORIGIN + "/v1/chat/completions" and exchange.stream
    assert json.loads(exchange.body) == {"model": MODEL, "messages": MESSAGES, "max_tokens": 16}


@pytest.mark.parametrize(("path", "hint"), [("/embeddings", "TEI"), ("/responses", "openai")])
def test_embeddings_and_responses_are_refused(path: str, hint: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        TgiAdapter().exchange(path, {"model": MODEL, "input": "x"}, ORIGIN, stream=False)
    assert hint in caught.value.message


# --- load -------------------------------------------------------------------------------------------


PAGE = b"""# HELP tgi_batch_current_size Current batch size
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# HELP tgi_queue_size Current queue size
# TYPE tgi_queue_size gauge
tgi_queue_size 9
# HELP tgi_batch_current_max_tokens Maximum tokens for the current batch
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 121344
# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 161792
tgi_request_failure{err="validation"} 1
tgi_request_input_length_bucket{le="+Inf"} 14
"""


def test_the_load_is_the_queue_the_batch_and_the_reserved_share_of_tokens() -> None:
    load = TgiAdapter().parse_load(PAGE)
    assert load is not None
    assert (load.num_waiting, load.num_running, load.kv_cache_usage) == (9.0, 16.0, 0.75)


def test_without_the_capacity_the_kv_use_is_zero() -> None:
    page = b"tgi_queue_size 2\ntgi_batch_current_size 3\ntgi_batch_current_max_tokens 4096\n"
    load = parse_tgi_metrics(page)
    assert load is not None and (load.num_waiting, load.num_running, load.kv_cache_usage) == (2.0, 3.0, 0.0)


def test_a_full_batch_is_at_most_one() -> None:
    page = b"tgi_queue_size 0\ntgi_batch_current_max_tokens 9000\ntgi_batch_max_total_tokens 8192\n"
    load = parse_tgi_metrics(page)
    assert load is not None and load.kv_cache_usage == 1.0 and load.num_running == 0.0


def test_a_page_without_tgis_load_says_nothing() -> None:
    assert parse_tgi_metrics(b"vllm:num_requests_waiting 3\n# TYPE tgi_queue_size gauge\n") is None
