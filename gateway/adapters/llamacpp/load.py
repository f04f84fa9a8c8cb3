"""llama.cpp's load pages as a ``ReplicaLoad``.

``GET /slots`` (a JSON list: the slots ``is_processing`` are the running requests, the tokens they
hold, ``n_prompt_tokens``, over the slots' ``n_ctx`` the KV use; it shows no queue), or, where the
replica's ``metrics_url`` points at ``/metrics`` (``--metrics``), ``llamacpp:requests_processing``
(running), ``llamacpp:requests_deferred`` (waiting) and ``llamacpp:kv_cache_usage_ratio`` (older
servers).
"""

from __future__ import annotations

import msgspec

from gateway.adapters.load import ReplicaLoad, fraction, prometheus_values

__all__ = ["metrics_load", "slots_load"]

_PROCESSING = b"llamacpp:requests_processing"
_DEFERRED = b"llamacpp:requests_deferred"
_KV_RATIO = b"llamacpp:kv_cache_usage_ratio"


def slots_load(page: bytes) -> ReplicaLoad | None:
    """Running: the slots ``is_processing``; KV: the tokens those slots hold (``n_prompt_tokens``: the
    prompt and what was generated so far) over every slot's ``n_ctx``; no queue on this page."""
    try:
        slots = msgspec.json.decode(page)
    except msgspec.DecodeError:
        return None
    if not isinstance(slots, list):
        return None
    running = held = capacity = 0
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        n_ctx = slot.get("n_ctx")
        capacity += n_ctx if type(n_ctx) is int and n_ctx > 0 else 0
        if slot.get("is_processing") is True:
            running += 1
            tokens = slot.get("n_prompt_tokens")
            held += tokens if type(tokens) is int and tokens > 0 else 0
    return ReplicaLoad(0.0, float(running), fraction(held / capacity) if capacity else 0.0)


def metrics_load(page: bytes) -> ReplicaLoad | None:
    values = prometheus_values(page, (_PROCESSING, _DEFERRED, _KV_RATIO))
    if not values:
        return None
    kv = max((fraction(v) for v in values.get(_KV_RATIO, ())), default=0.0)
    return ReplicaLoad(sum(values.get(_DEFERRED, ())), sum(values.get(_PROCESSING, ())), kv)
