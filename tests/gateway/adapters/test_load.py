"""Reading load pages: the Prometheus reader every kind shares, and vLLM's names."""

from __future__ import annotations

from gateway.adapters.load import (
    ReplicaLoad,
    fraction,
    parse_vllm_metrics,
    prometheus_samples,
    prometheus_values,
)

PAGE = b"""# HELP tgi_queue_size Current queue size
# TYPE tgi_queue_size gauge
tgi_queue_size 3
tgi_batch_current_size{shard="0"} 2
tgi_batch_current_size{shard="1"} 1 1700000000000
tgi_other 9
tgi_queue_size_nan NaN
"""


def test_prometheus_values_collects_every_sample_of_the_names_asked_for() -> None:
    values = prometheus_values(PAGE, (b"tgi_queue_size", b"tgi_batch_current_size", b"absent"))
    assert values == {b"tgi_queue_size": [3.0], b"tgi_batch_current_size": [2.0, 1.0]}


def test_vllm_names_and_clamping() -> None:
    page = (
        b'vllm:num_requests_waiting{engine="0"} 2\n'
        b"vllm:num_requests_running 1\n"
        b"vllm:kv_cache_usage_perc 1.5\n"
    )
    assert parse_vllm_metrics(page) == ReplicaLoad(2.0, 1.0, 1.0)
    assert parse_vllm_metrics(PAGE) is None
    assert fraction(-1) == 0.0 and fraction(0.25) == 0.25


def test_prometheus_samples_keep_each_samples_labels() -> None:
    page = b'nv_trt_llm_request_metrics{model="e",request_type="waiting"} 4\nnv_trt_llm_request_metrics 1\n'
    assert prometheus_samples(page, (b"nv_trt_llm_request_metrics",)) == [
        (b"nv_trt_llm_request_metrics", {b"model": b"e", b"request_type": b"waiting"}, 4.0),
        (b"nv_trt_llm_request_metrics", {}, 1.0),
    ]
