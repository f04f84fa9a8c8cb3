"""Triton's metrics page as a replica's load: the recorded pages, TensorRT-LLM's request and KV block
metrics per engine, Triton's vLLM backend, and odd lines."""

from __future__ import annotations

import pytest

from gateway.adapters.load import ReplicaLoad
from gateway.adapters.triton import TritonAdapter
from gateway.adapters.triton.load import parse_triton_metrics
from tests.support.wire_fake import load_transcript


def _page(name: str) -> bytes:
    transcript = load_transcript("triton")
    response = next(e["response"] for e in transcript["exchanges"] if e["name"] == name)
    return "".join(response["chunks"]).encode()


def test_the_recorded_metrics_pages_read_as_load() -> None:
    assert parse_triton_metrics(_page("metrics")) == ReplicaLoad(0.0, 0.0, 0.0)
    busy = parse_triton_metrics(_page("metrics-busy"))
    assert busy is not None
    assert (busy.num_waiting, busy.num_running) == (14.0, 48.0) and busy.kv_cache_usage == pytest.approx(0.94)
    assert TritonAdapter().parse_load(_page("metrics-busy")) == busy


def test_without_a_fraction_kv_is_used_over_max_and_without_scheduled_running_is_active() -> None:
    page = (
        b'nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 1\n'
        b'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 5\n'
        b'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 30\n'
        b'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 120\n'
        b'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="draft",version="1"} 90\n'
        b'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="draft",version="1"} 100\n'
    )
    assert parse_triton_metrics(page) == ReplicaLoad(1.0, 5.0, 0.9)  # the fullest engine's KV


def test_tritons_vllm_backend_figures_are_added() -> None:
    page = (
        b'nv_inference_pending_request_count{model="vllm_model",version="1"} 0\n'
        b'vllm:num_requests_waiting{model="vllm_model",version="1"} 3\n'
        b'vllm:num_requests_running{model="vllm_model",version="1"} 2\n'
        b'vllm:gpu_cache_usage_perc{model="vllm_model",version="1"} 0.5\n'
    )
    assert parse_triton_metrics(page) == ReplicaLoad(3.0, 2.0, 0.5)


def test_odd_lines_are_skipped_and_a_page_without_the_figures_is_none() -> None:
    page = (
        b"# HELP nv_inference_pending_request_count pending\n"
        b'nv_inference_pending_request_count{model="a \\"quoted\\", name",version="1"} 2 1700000000000\n'
        b'nv_inference_pending_request_count{model="b",version="1"} NaN\n'
        b"nv_inference_pending_request_count\n"
        b'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="m",version="1"} 0\n'
        b"nv_gpu_utilization 0.7\n"
    )
    assert parse_triton_metrics(page) == ReplicaLoad(2.0, 0.0, 0.0)
    assert parse_triton_metrics(b"nv_gpu_utilization 0.7\n") is None
    assert parse_triton_metrics(b"") is None
