"""KV-cache quantization (``--kv-cache-dtype int8|fp8``): how a quantized K or V row is stored and read.

A cache tensor keeps the attention backend's layout, [num_kv_heads, num_slots, row], but each row (one kv
head of one token) is ``head_dim`` one-byte codes followed by that row's fp32 scale in 4 bytes, so the
cache's dtype (``torch.int8`` or ``torch.float8_e4m3fn``) says how to read it and the scale travels with
its codes: one ``index_copy_`` writes both, one gather reads both, and the C decode kernel finds the scale
right after the row it has just read.

int8: symmetric per (token, kv head): ``scale = amax / 127``, ``code = round(x / scale)``.
fp8: e4m3 codes of ``x / scale`` with ``scale = amax / 448`` per (token, kv head) too. e4m3's relative
precision does not depend on the scale, but a per-row scale keeps every row in range with no calibration
(K outliers past 448 would saturate under vLLM's default per-tensor scale of 1.0) and no row in the
subnormals; it costs the same 4 bytes a row as int8's and keeps one layout for both.
"""

from __future__ import annotations

import torch

from backends.engine.kernels import KV_SCALE_BYTES

SCALE_BYTES = KV_SCALE_BYTES
"""One fp32 scale after each row's codes."""
STORAGE_DTYPES = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
"""``--kv-cache-dtype`` names (vLLM's) to the cache tensor's dtype; "auto" keeps the model's dtype."""
_QMAX = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0}


def is_quantized(cache: torch.Tensor) -> bool:
    """The cache holds codes and scales (its dtype is one of ``STORAGE_DTYPES``'), not plain values."""
    return cache.dtype in _QMAX


def storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """The cache tensor's dtype for ``kv_cache_dtype`` ("auto": the model's)."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype not in STORAGE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be 'auto' or one of {list(STORAGE_DTYPES)}")
    return STORAGE_DTYPES[kv_cache_dtype]


def row_width(head_dim: int, kv_cache_dtype: str) -> int:
    """Elements of one cached row: ``head_dim``, plus the scale's bytes when quantized."""
    if kv_cache_dtype == "auto":
        return head_dim
    if head_dim % SCALE_BYTES:
        raise ValueError(f"a quantized KV cache needs head_dim divisible by {SCALE_BYTES}, got {head_dim}")
    return head_dim + SCALE_BYTES


def row_bytes(head_dim: int, dtype_bytes: int, kv_cache_dtype: str) -> int:
    """Bytes of one cached row (one kv head of one token, K or V) for a model of ``dtype_bytes``."""
    if kv_cache_dtype == "auto":
        return head_dim * dtype_bytes
    return row_width(head_dim, kv_cache_dtype)


def quantize(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows [..., head_dim] (any float dtype) to packed rows [..., head_dim + 4] of ``dtype``."""
    qmax = _QMAX[dtype]
    xf = x.float()
    scale = (xf.abs().amax(-1, keepdim=True) / qmax).clamp_min(torch.finfo(torch.float32).tiny)
    scaled = (xf / scale).clamp(-qmax, qmax)
    codes = scaled.round().to(dtype) if dtype == torch.int8 else scaled.to(dtype)
    packed = torch.cat([codes.view(torch.uint8), scale.view(torch.uint8)], dim=-1)
    return packed.view(dtype)


def dequantize(packed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Packed rows [..., head_dim + 4] (contiguous) back to values [..., head_dim] in ``dtype``."""
    head_dim = packed.shape[-1] - SCALE_BYTES
    scale = packed[..., head_dim:].view(torch.float32)
    return (packed[..., :head_dim].float() * scale).to(dtype)


def write(cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> None:
    """Store rows x [T, num_kv_heads, head_dim] at ``slots`` of cache [num_kv_heads, num_slots, row]."""
    packed = quantize(x.transpose(0, 1), cache.dtype)
    cache.view(torch.uint8).index_copy_(1, slots, packed.view(torch.uint8))


def gather(cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Values [num_kv_heads, len(slots), head_dim] in ``dtype`` of the rows at ``slots``."""
    rows = cache.view(torch.uint8).index_select(1, slots).view(cache.dtype)
    return dequantize(rows, dtype)
