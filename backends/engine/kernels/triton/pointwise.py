"""The decoder's pointwise steps on the GPU, one pass each: SiLU-and-mul, residual add + RMSNorm, rotary.

``TritonPointwise`` has ``cpu_pointwise.CpuPointwise``'s interface, so the layers ask
``kernels.pointwise.for_device`` and call the same methods on either. Each kernel computes in fp32 and
rounds where the torch reference rounds: the residual sum in the model's dtype (``h = h + x``), the
normalised row cast to the dtype before the weight's product (Llama), rotary's products in fp32. Torch's
eager path launches three to six kernels for each of these (each a trip through HBM); at batch 1 decode
the launches themselves dominate, which is what CUDA graphs then remove.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["TritonPointwise"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _silu_and_mul(x_ptr: tl.tensor, out_ptr: tl.tensor, inner: tl.tensor, BLOCK: tl.constexpr) -> None:
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inner
    gate = tl.load(x_ptr + row * 2 * inner + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * 2 * inner + inner + cols, mask=mask, other=0.0).to(tl.float32)
    silu = gate / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + row * inner + cols, (silu * up).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _round_to_bf16(x: tl.tensor) -> tl.tensor:
    """fp32 x rounded half to even to bf16's 8 mantissa bits, still in fp32 (the cast after is exact;
    the interpreter's own fp32 -> bf16 cast truncates)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # -65536: the mask 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _rms_norm(
    x_ptr: tl.tensor,
    residual_ptr: tl.tensor,
    weight_ptr: tl.tensor,
    out_ptr: tl.tensor,
    hidden: tl.tensor,
    eps: tl.tensor,
    HAS_RESIDUAL: tl.constexpr,
    IS_BF16: tl.constexpr,
    BLOCK: tl.constexpr,
) -> None:
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0)
    dtype = x.dtype
    h = x.to(tl.float32)
    if HAS_RESIDUAL:  # the sum rounded to the dtype, as torch's h + x (which adds in fp32 too)
        h = tl.load(residual_ptr + row * hidden + cols, mask=mask, other=0.0).to(tl.float32) + h
        if IS_BF16:
            h = _round_to_bf16(h)
        h = h.to(dtype)
        tl.store(residual_ptr + row * hidden + cols, h, mask=mask)
        h = h.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / hidden + eps)
    normed = h * inv_rms
    if IS_BF16:
        normed = _round_to_bf16(normed)
    normed = normed.to(dtype).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * hidden + cols, (normed * weight).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary(
    x_ptr: tl.tensor,
    positions_ptr: tl.tensor,
    cos_ptr: tl.tensor,
    sin_ptr: tl.tensor,
    row_width: tl.tensor,
    HEAD_DIM: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
) -> None:
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    half = HEAD_DIM // 2
    cols = tl.arange(0, BLOCK_HALF)
    mask = cols < half
    position = tl.load(positions_ptr + token)
    base = x_ptr + token * row_width + head * HEAD_DIM
    x1 = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + half + cols, mask=mask, other=0.0).to(tl.float32)
    # the tables hold each frequency twice (first half, second half), as transformers builds them
    cos = tl.load(cos_ptr + position * HEAD_DIM + cols, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + position * HEAD_DIM + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(base + cols, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(base + half + cols, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)


class TritonPointwise:
    """The pointwise kernels for tensors on a GPU (or on the CPU under Triton's interpreter)."""

    @staticmethod
    def supports(*tensors: torch.Tensor) -> bool:
        """Every tensor on one device, contiguous, and of one float dtype the kernels take."""
        first = tensors[0]
        return first.dtype in _DTYPES and all(
            t.device == first.device and t.dtype == first.dtype and t.is_contiguous() for t in tensors
        )

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """SiLU(gate) * up for x = [..., 2 * inner] (gate | up): [..., inner]."""
        inner = x.shape[-1] // 2
        out = torch.empty((*x.shape[:-1], inner), dtype=x.dtype, device=x.device)
        rows = x.numel() // (2 * inner) if inner else 0
        if rows:
            block = min(triton.next_power_of_2(inner), 1024)
            _silu_and_mul[(rows, triton.cdiv(inner, block))](x, out, inner, BLOCK=block)
        return out

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Llama's RMSNorm of x times weight; with ``residual``, of residual + x, which is written back
        into ``residual`` first (the decoder's running sum)."""
        hidden = x.shape[-1]
        out = torch.empty_like(x)
        rows = x.numel() // hidden
        if rows:
            _rms_norm[(rows,)](
                x, x if residual is None else residual, weight, out, hidden, eps,
                HAS_RESIDUAL=residual is not None, IS_BF16=x.dtype == torch.bfloat16,
                BLOCK=triton.next_power_of_2(hidden),
            )  # fmt: skip
        return out

    def rotary(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        num_heads: int,
        head_dim: int,
    ) -> None:
        """Rotates, in place, the first ``num_heads`` heads of each row of x ([tokens, row], such as a
        fused q|k|v output) at ``positions`` (int64); cos, sin: [max_position, head_dim] in x's dtype."""
        if x.shape[0] and num_heads:
            _rotary[(x.shape[0], num_heads)](
                x, positions, cos, sin, x.shape[1], HEAD_DIM=head_dim,
                BLOCK_HALF=triton.next_power_of_2(head_dim // 2),
            )  # fmt: skip
