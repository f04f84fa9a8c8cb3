"""What both attention kernels share: reading K/V rows of the paged cache as tiles, and the tile matmul.

The cache is ``TorchPagedAttention``'s: [num_kv_heads, num_slots, width], slot = block_id * block_size +
offset, one row per (kv head, token). A plain row is ``head_dim`` values in the model's dtype. A quantized
row (``layers/kv_quant.py``) is ``head_dim`` one-byte codes (int8 or fp8 e4m3) and then that row's fp32
scale in 4 bytes; ``width = head_dim + 4``. Since head_dim and width are multiples of 4, a row's scale
sits at float index ``(row_offset + head_dim) // 4`` of the same storage viewed as fp32, so the kernels
take the cache twice: as codes and as that fp32 view (``scale_view``).

Matmuls (``tl.dot``, as ``DotConfig`` says) take operands in the model's dtype and accumulate in fp32:
IEEE for fp32 operands (TF32 would miss fp32's tolerance). Triton's interpreter multiplies bf16 tiles as
their raw 16-bit integers, so there (only) bf16 operands are widened to fp32 after rounding to bf16; bf16
products are exact in fp32, so this is the GPU's bf16 x bf16 -> fp32 up to the order of the sums.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

QMAX = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0}
"""A quantized cache's dtype and its largest code: ``layers/kv_quant.py``'s (the kernels sit below the
layers, so they do not import it; the tests hold the two to the same bits)."""


def is_quantized(cache: torch.Tensor) -> bool:
    """The cache holds codes and scales, not plain values."""
    return cache.dtype in QMAX


NO_WINDOW = 1 << 30
"""The window the kernels get when there is none: further back than any sequence."""
_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


@dataclass(frozen=True)
class DotConfig:
    """How the kernels' ``tl.dot`` multiplies tiles of one dtype; its fields go in as constexprs."""

    dtype: tl.dtype
    """The operands' dtype: the model's, or fp32 for bf16 under the interpreter."""
    precision: str
    """``tl.dot``'s input_precision: "ieee" for fp32 operands, else "tf32" (ignored by 16-bit ones)."""

    @classmethod
    def of(cls, dtype: torch.dtype) -> DotConfig:
        if dtype == torch.float32 or (dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1"):
            return cls(tl.float32, "ieee")
        return cls(_TL_DTYPES[dtype], "tf32")


def scale_view(cache: torch.Tensor) -> torch.Tensor:
    """The cache's storage as fp32, where quantized rows keep their scales; the cache itself when plain
    (the kernels then never read it)."""
    if not is_quantized(cache):
        return cache
    return cache.view(torch.float32)


def block_dim(head_dim: int) -> int:
    """The tile width covering ``head_dim``: a power of two, at least 16 (``tl.dot``'s minimum)."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def load_kv_tile(
    cache_ptr: tl.tensor,
    scale_ptr: tl.tensor,
    head_offset: tl.tensor,
    rows: tl.tensor,
    row_stride: tl.tensor,
    is_row: tl.tensor,
    dtype: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_QUANTIZED: tl.constexpr,
) -> tl.tensor:
    """[len(rows), BLOCK_D] values in ``dtype`` of the rows at ``rows`` (slots of the cache, or tokens of
    a fresh k/v tensor), zero where ``is_row`` is False or past ``HEAD_DIM``: a never-written slot may hold
    NaN, which a zero probability would not cancel."""
    d = tl.arange(0, BLOCK_D)
    offsets = head_offset + rows.to(tl.int64) * row_stride
    mask = is_row[:, None] & (d < HEAD_DIM)[None, :]
    if IS_QUANTIZED:  # codes times their row's scale (fp8 takes no ``other``: masked after widening)
        codes = tl.load(cache_ptr + offsets[:, None] + d[None, :], mask=mask)
        scale = tl.load(scale_ptr + (offsets + HEAD_DIM) // 4, mask=is_row, other=0.0)
        return tl.where(mask, codes.to(tl.float32) * scale[:, None], 0.0).to(dtype)
    return tl.load(cache_ptr + offsets[:, None] + d[None, :], mask=mask, other=0.0).to(dtype)
