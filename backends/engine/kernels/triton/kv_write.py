"""The KV-cache write: a step's k/v rows to their slots, quantized when the cache holds int8/fp8 rows.

One program per token writes its K and V rows, every kv head's, at ``head * stride + slot * width`` of
the caches (``tiles.py`` draws the layout). Plain rows are copied in the cache's dtype. Quantized rows
are quantized as ``kv_quant.quantize`` does, to the bit: ``scale = max(amax / qmax, tiny)`` and
``code = clamp(x / scale, -qmax, qmax)``, both divisions IEEE (``div_rn``; Triton's plain fp32 division may
be approximate on a GPU), int8 codes rounded half to even like ``torch.round``, fp8 codes rounded to
nearest-even e4m3 explicitly in fp32 first (so the interpreter's cast agrees too); the scale goes to
the 4 bytes after the codes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from backends.engine.kernels.triton.tiles import QMAX, block_dim, is_quantized, scale_view

FLOAT32_TINY = torch.finfo(torch.float32).tiny
"""The smallest scale, so an all-zero row divides by something."""


@triton.jit
def _round_half_even(x: tl.tensor) -> tl.tensor:
    """``torch.round``: to the nearest integer, ties to the even one (``floor(x + 0.5)`` is not exact)."""
    down = tl.floor(x)
    frac = x - down  # exact
    is_odd = (down - 2.0 * tl.floor(down * 0.5)) != 0.0
    up = (frac > 0.5) | ((frac == 0.5) & is_odd)
    return tl.where(up, down + 1.0, down)


@triton.jit
def _round_to_e4m3(x: tl.tensor) -> tl.tensor:
    """x (fp32, |x| <= 448) rounded half to even to the nearest fp8 e4m3 value, still in fp32: 3 mantissa
    bits, exponents down to -6, then the subnormals' fixed step of 2**-9. The cast of the result to fp8 is
    then exact everywhere (the interpreter's own fp32 -> fp8 cast drops a carry into the exponent)."""
    exponent = tl.maximum(((tl.abs(x).to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
    step = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 2**(e - 3)
    per_step = ((3 - exponent + 127) << 23).to(tl.float32, bitcast=True)  # 1 / step, a power of two too
    rounded = _round_half_even(tl.abs(x) * per_step) * step  # both products exact
    return tl.where(x < 0, -rounded, rounded)  # -0.0 when a negative x rounds to zero, as torch's cast


@triton.jit
def _write_rows(
    src_ptr: tl.tensor,
    stride_src_h: tl.tensor,
    cache_ptr: tl.tensor,
    scale_ptr: tl.tensor,
    offsets: tl.tensor,
    NUM_KV_HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_QUANTIZED: tl.constexpr,
    IS_INT8: tl.constexpr,
    QMAX: tl.constexpr,
    TINY: tl.constexpr,
) -> None:
    """One token's rows [kv heads, head_dim] from ``src_ptr`` to the cache rows at ``offsets``."""
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    is_head = h < NUM_KV_HEADS
    mask = is_head[:, None] & (d < HEAD_DIM)[None, :]
    x = tl.load(src_ptr + h[:, None] * stride_src_h + d[None, :], mask=mask, other=0.0)
    dst = cache_ptr + offsets[:, None] + d[None, :]
    if IS_QUANTIZED:  # a scale per row: per (token, kv head)
        xf = x.to(tl.float32)
        scale = tl.maximum(tl.div_rn(tl.max(tl.abs(xf), 1), QMAX), TINY)
        codes = tl.minimum(tl.maximum(tl.div_rn(xf, scale[:, None]), -QMAX), QMAX)
        if IS_INT8:
            codes = _round_half_even(codes)
        else:
            codes = _round_to_e4m3(codes)
        tl.store(dst, codes.to(cache_ptr.dtype.element_ty), mask=mask)
        tl.store(scale_ptr + (offsets + HEAD_DIM) // 4, scale, mask=is_head)
    else:
        tl.store(dst, x.to(cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _write_kernel(
    k_ptr: tl.tensor,
    v_ptr: tl.tensor,
    k_cache_ptr: tl.tensor,
    v_cache_ptr: tl.tensor,
    k_scale_ptr: tl.tensor,
    v_scale_ptr: tl.tensor,
    slots_ptr: tl.tensor,
    stride_kt: tl.tensor,
    stride_kh: tl.tensor,
    stride_vt: tl.tensor,
    stride_vh: tl.tensor,
    stride_ch: tl.tensor,
    stride_cs: tl.tensor,
    NUM_KV_HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_QUANTIZED: tl.constexpr,
    IS_INT8: tl.constexpr,
    QMAX: tl.constexpr,
    TINY: tl.constexpr,
) -> None:
    """One program per token: its K rows and V rows, every kv head, to its slot."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + token).to(tl.int64)
    offsets = tl.arange(0, BLOCK_H).to(tl.int64) * stride_ch + slot * stride_cs
    _write_rows(
        k_ptr + token * stride_kt,
        stride_kh,
        k_cache_ptr,
        k_scale_ptr,
        offsets,
        NUM_KV_HEADS,
        BLOCK_H,
        HEAD_DIM,
        BLOCK_D,
        IS_QUANTIZED,
        IS_INT8,
        QMAX,
        TINY,
    )
    _write_rows(
        v_ptr + token * stride_vt,
        stride_vh,
        v_cache_ptr,
        v_scale_ptr,
        offsets,
        NUM_KV_HEADS,
        BLOCK_H,
        HEAD_DIM,
        BLOCK_D,
        IS_QUANTIZED,
        IS_INT8,
        QMAX,
        TINY,
    )


def write_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
) -> None:
    """Store k, v [T, num_kv_heads, head_dim] (rows may be strided, dims packed) at ``slots`` (int64 [T])
    of the caches, quantizing when they hold int8/fp8 rows."""
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    if k.stride(2) != 1 or v.stride(2) != 1:
        k, v = k.contiguous(), v.contiguous()
    _write_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        scale_view(k_cache),
        scale_view(v_cache),
        slots,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        NUM_KV_HEADS=num_kv_heads,
        BLOCK_H=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim,
        BLOCK_D=block_dim(head_dim),
        IS_QUANTIZED=is_quantized(k_cache),
        IS_INT8=k_cache.dtype == torch.int8,
        QMAX=QMAX.get(k_cache.dtype, 0.0),
        TINY=FLOAT32_TINY,
    )
