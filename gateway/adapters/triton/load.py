"""Triton's load: its Prometheus metrics page (on the metrics port, 8002) as a ``ReplicaLoad``.

Triton's own pending-request count, TensorRT-LLM's request and KV-cache block metrics (per engine,
by label), and the figures of Triton's vLLM backend where it serves one; ``parse_triton_metrics``
says which figure is read how.
"""

from __future__ import annotations

from gateway.adapters.load import ReplicaLoad, fraction, parse_vllm_metrics, prometheus_samples

__all__ = ["parse_triton_metrics"]

_PENDING = b"nv_inference_pending_request_count"
_REQUESTS = b"nv_trt_llm_request_metrics"
_KV_BLOCKS = b"nv_trt_llm_kv_cache_block_metrics"


def parse_triton_metrics(page: bytes) -> ReplicaLoad | None:
    """A Triton metrics page's load; None when it states none of these figures:

    - waiting: ``nv_inference_pending_request_count`` (queued in Triton, summed over models) plus
      TensorRT-LLM's ``nv_trt_llm_request_metrics{request_type="waiting"}`` (queued in the engine);
    - running: ``nv_trt_llm_request_metrics{request_type="scheduled"}`` (in the running batch; the
      ``active`` count where a release has no ``scheduled``);
    - KV: ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}``, else ``used`` /
      ``max``; the fullest engine's;
    - Triton's vLLM backend's ``vllm:num_requests_waiting``, ``_running``, ``gpu_cache_usage_perc``
      are added where present."""
    samples = prometheus_samples(page, (_PENDING, _REQUESTS, _KV_BLOCKS))
    vllm = parse_vllm_metrics(page)
    if not samples and vllm is None:
        return None
    waiting = sum(value for name, _, value in samples if name == _PENDING)
    requests: dict[tuple[bytes, bytes], dict[bytes, float]] = {}
    blocks: dict[tuple[bytes, bytes], dict[bytes, float]] = {}
    for name, labels, value in samples:
        engine = (labels.get(b"model", b""), labels.get(b"version", b""))
        if name == _REQUESTS:
            requests.setdefault(engine, {})[labels.get(b"request_type", b"")] = value
        elif name == _KV_BLOCKS:
            blocks.setdefault(engine, {})[labels.get(b"kv_cache_block_type", b"")] = value
    running = 0.0
    for counts in requests.values():
        waiting += counts.get(b"waiting", 0.0)
        running += counts.get(b"scheduled", counts.get(b"active", 0.0))
    kv = 0.0
    for counts in blocks.values():
        if b"fraction" in counts:
            kv = max(kv, fraction(counts[b"fraction"]))
        elif counts.get(b"max", 0.0) > 0 and b"used" in counts:
            kv = max(kv, fraction(counts[b"used"] / counts[b"max"]))
    if vllm is not None:
        waiting += vllm.num_waiting
        running += vllm.num_running
        kv = max(kv, vllm.kv_cache_usage)
    return ReplicaLoad(waiting, running, kv)
