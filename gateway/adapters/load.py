"""What a replica's load page says: ``ReplicaLoad``, and the Prometheus text reader every kind shares.

Each backend kind names its load differently (vLLM ``vllm:num_requests_waiting``, TGI
``tgi_queue_size``, llama.cpp ``llamacpp:requests_deferred``, Triton
``nv_inference_pending_request_count``, Ollama a JSON ``/api/ps``); its adapter reads them into this
one shape, which the ``load_aware`` strategy weighs and the console shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ReplicaLoad", "Sample", "parse_vllm_metrics", "prometheus_samples", "prometheus_values"]


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """A replica's load (summed over its engines; KV: the fullest)."""

    num_waiting: float
    """Requests queued, not yet running."""
    num_running: float
    """Requests being generated."""
    kv_cache_usage: float
    """How full its KV cache is, 0..1 (0 when the backend does not say)."""


Sample = tuple[bytes, dict[bytes, bytes], float]
"""One sample of a Prometheus text page: its metric name, its labels, its value."""

_LABEL = re.compile(rb'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def prometheus_samples(page: bytes, names: Iterable[bytes]) -> list[Sample]:
    """Every sample of the metrics ``names`` on a Prometheus text page, with its labels, in page order
    (NaN skipped; a timestamp after the value ignored)."""
    wanted = set(names)
    prefixes = tuple({name[:4] for name in wanted})
    found: list[Sample] = []
    for line in page.splitlines():
        if not line.startswith(prefixes):
            continue
        brace, space = line.find(b"{"), line.find(b" ")
        if brace != -1 and (space == -1 or brace < space):
            name, close = line[:brace], line.rfind(b"}")
            if name not in wanted or close < brace:
                continue
            labels, rest = dict(_LABEL.findall(line[brace + 1 : close])), line[close + 1 :]
        elif space != -1:
            name, labels, rest = line[:space], {}, line[space:]
            if name not in wanted:
                continue
        else:
            continue
        fields = rest.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        if value == value:  # not NaN
            found.append((name, labels, value))
    return found


def prometheus_values(page: bytes, names: Iterable[bytes]) -> dict[bytes, list[float]]:
    """Every sample of the metrics ``names`` on a Prometheus text page, by name (labels ignored,
    NaN skipped); a name with no sample is absent."""
    found: dict[bytes, list[float]] = {}
    for name, _, value in prometheus_samples(page, names):
        found.setdefault(name, []).append(value)
    return found


def fraction(value: float) -> float:
    """``value`` clamped to 0..1."""
    return min(max(value, 0.0), 1.0)


_WAITING = b"vllm:num_requests_waiting"
_RUNNING = b"vllm:num_requests_running"
_KV_NAMES = (b"vllm:kv_cache_usage_perc", b"vllm:gpu_cache_usage_perc")


def parse_vllm_metrics(page: bytes) -> ReplicaLoad | None:
    """vLLM's three load figures (``vllm:num_requests_waiting``, ``_running``, ``kv_cache_usage_perc``
    or the older ``gpu_cache_usage_perc``); None when the page has none of them."""
    values = prometheus_values(page, (_WAITING, _RUNNING, *_KV_NAMES))
    if not values:
        return None
    kv = [fraction(v) for name in _KV_NAMES for v in values.get(name, ())]
    return ReplicaLoad(sum(values.get(_WAITING, ())), sum(values.get(_RUNNING, ())), max(kv, default=0.0))
