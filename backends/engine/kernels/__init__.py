"""Native kernels the engine builds on first use; each has a pure-torch reference it is tested against."""

from __future__ import annotations

import os

KV_SCALE_BYTES = 4
"""A quantized KV cache row is its codes then one fp32 scale (``layers/kv_quant.py`` writes it,
``paged_decode.c`` reads it in place)."""


def cpu_kernels_enabled() -> bool:
    """``SORTYARD_CPU_KERNELS=0`` turns off every CPU-specific path: the native decode kernel and
    the oneDNN weight prepacking."""
    return os.environ.get("SORTYARD_CPU_KERNELS", "1") != "0"
