"""The GPU metrics: vLLM's older KV-usage name and torch's device memory, only for models on CUDA."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from backends.engine.stats import EngineStats
from backends.serving.metrics import ServerMetrics


def _stats(*, is_cuda: bool) -> EngineStats:
    return EngineStats(
        num_running=1,
        num_waiting=0,
        kv_cache_usage=0.5,
        num_blocks_total=8,
        num_blocks_free=4,
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        num_preemptions=0,
        num_generated_tokens=0,
        num_prompt_tokens=0,
        is_cuda=is_cuda,
        gpu_memory_allocated_bytes=3 << 30 if is_cuda else 0,
        gpu_memory_reserved_bytes=4 << 30 if is_cuda else 0,
    )


def _samples(metrics: ServerMetrics) -> dict[tuple[str, str, str], float]:
    families = text_string_to_metric_families(metrics.render().decode())
    return {
        (s.name, s.labels.get("model_name", ""), s.labels.get("kind", "")): s.value
        for f in families
        for s in f.samples
    }


def test_a_model_on_cuda_gets_the_gpu_names() -> None:
    metrics = ServerMetrics()
    metrics.watch("gpu", lambda: _stats(is_cuda=True))
    metrics.watch("cpu", lambda: _stats(is_cuda=False))
    scraped = _samples(metrics)
    assert scraped[("vllm:gpu_cache_usage_perc", "gpu", "")] == 0.5
    assert scraped[("vllm:kv_cache_usage_perc", "gpu", "")] == 0.5  # the alias, beside the current name
    assert scraped[("sortyard_engine_gpu_memory_bytes", "gpu", "allocated")] == 3 << 30
    assert scraped[("sortyard_engine_gpu_memory_bytes", "gpu", "reserved")] == 4 << 30
    assert ("vllm:gpu_cache_usage_perc", "cpu", "") not in scraped
    assert ("sortyard_engine_gpu_memory_bytes", "cpu", "allocated") not in scraped


def test_no_gpu_metric_without_a_model_on_cuda() -> None:
    metrics = ServerMetrics()
    metrics.watch("cpu", lambda: _stats(is_cuda=False))
    metrics.watch("loading", lambda: None)
    text = metrics.render().decode()
    assert "gpu" not in text
