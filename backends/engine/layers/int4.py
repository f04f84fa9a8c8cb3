"""INT4 weights (``--quantization int4``): 4-bit values per group of 32 input columns, asymmetric (a scale
and a zero per group and output row), ``w = (q - 8) * scale + zero`` with q in 0..15.

The CPU kernel is torch's weight-only ``aten._weight_int4pack_mm_for_cpu(x, packed, group_size,
scale_and_zero [K / group, N, 2])`` on the weight ``aten._convert_weight_to_int4pack_for_cpu`` packs
(from int32 [N, K]; N a multiple of 16, groups of 32, 64, 128 or 256). It runs with bfloat16 activations,
scales and zeros: with fp32 ones it computes the same, 18-20x slower (1 and 16 rows). At SmolLM2-135M's
shapes on the 2-core Zen 4 VM (AVX512-BF16; busy, load ~8, so rough), weights out of cache as in decode,
one layer's GEMMs took 3.7 ms at one row against 8.9 int8 and 20.8 for the fp32 oneDNN GEMM, 16 against
40 and 75 at 16 rows. At 64-512 rows (prefill) it is no faster than fp32: 1.1-1.2x slower on one
thread, best of 9 (the 2-thread medians, 1.5-3.7x slower, were too noisy on that VM to trust).

From float weights the groups take their min and max (``quantize_int4``); from a GGUF's Q4_1 blocks
(``w = d q + m``) the values are the file's own, with ``scale = d`` and ``zero = m + 8 d`` (Q4_0:
``zero = 0``), exact up to the bf16 rounding of the scales and zeros (bf16 keeps 8 significant bits of the
fp16 d's 11).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from backends.engine.layers.gguf_blocks import QuantizedTensor

GROUP_SIZE = 32
"""Input columns per group by default, llama.cpp's Q4 block."""
PACK_ROWS = 64
"""The kernel packs rows 64 at a time: packing 64-row chunks and joining them gives the same bytes,
so the int32 copy the packer wants never spans more than 64 rows."""
_GROUP_SIZES = (32, 64, 128, 256)


def quantize_int4(
    weight: torch.Tensor, group_size: int = GROUP_SIZE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q uint8 [N, K] in 0..15, scale and zero bf16 [N, K / group]) with ``w ~= (q - 8) * scale + zero``.

    Each group maps its min..max onto 0..15; q is rounded against the bf16 scale and zero the kernel
    reads, so the stored parameters are the ones the values were chosen for."""
    rows, cols = weight.shape
    w = weight.detach().float().reshape(rows, cols // group_size, group_size)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    scale = ((hi - lo) / 15.0).clamp(min=1e-8).to(torch.bfloat16)
    zero = (lo + 8.0 * scale.float()).to(torch.bfloat16)
    q = torch.round((w - zero.float()[..., None]) / scale.float()[..., None]) + 8.0
    return q.clamp(0, 15).to(torch.uint8).reshape(rows, cols), scale, zero


class Int4Weight:
    """One linear layer's int4 weight [out, in], packed for the CPU kernel, with bf16 group scales and
    zeros, and its bias."""

    def __init__(
        self,
        q: torch.Tensor,
        scale: torch.Tensor,
        zero: torch.Tensor,
        bias: torch.Tensor | None,
        *,
        group_size: int = GROUP_SIZE,
    ) -> None:
        """``q`` uint8 [N, K] in 0..15; ``scale`` and ``zero`` [N, K / group_size], any float dtype."""
        _check(q, group_size)
        rows, cols = q.shape
        self.out_features, self.in_features, self.group_size = rows, cols, group_size
        self.packed = torch.cat(
            [
                torch.ops.aten._convert_weight_to_int4pack_for_cpu(q[r : r + PACK_ROWS].to(torch.int32), 1)
                for r in range(0, rows, PACK_ROWS)
            ]
        )
        self.scale_and_zero = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
        self.bias = bias

    @classmethod
    def from_float(
        cls, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int = GROUP_SIZE
    ) -> Int4Weight:
        _check(weight, group_size)
        q, scale, zero = quantize_int4(weight, group_size)
        return cls(q, scale, zero, bias, group_size=group_size)

    @classmethod
    def from_blocks(cls, shards: Sequence[QuantizedTensor], bias: torch.Tensor | None) -> Int4Weight:
        """The row-wise concatenation of ``shards`` (GGUF Q4_0 / Q4_1), their 4-bit values as they are."""
        unpacked = [shard.unpack() for shard in shards]
        q = np.concatenate([u[0] for u in unpacked])
        d = np.concatenate([u[1] for u in unpacked])
        m = np.concatenate([u[2] for u in unpacked])
        zero = m + np.float32(8.0) * d  # d q + m = d (q - 8) + (m + 8 d)
        return cls(
            torch.from_numpy(q),
            torch.from_numpy(d),
            torch.from_numpy(zero),
            bias,
            group_size=QuantizedTensor.GROUP_SIZE,
        )

    @property
    def num_weight_bytes(self) -> int:
        """Bytes of the packed 4-bit weight and its scales and zeros."""
        sz = self.scale_and_zero
        return self.packed.numel() * self.packed.element_size() + sz.numel() * sz.element_size()

    def dequantized(self) -> torch.Tensor:
        """W as [out, in] fp32, ``(q - 8) * scale + zero`` (read back through the kernel: x = I)."""
        eye = torch.eye(self.in_features, dtype=torch.float32)
        sz = self.scale_and_zero.float()
        w_t = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.packed, self.group_size, sz)
        return w_t.t().contiguous()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x W^T + b in x's dtype (the product computed from bf16 activations)."""
        flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            flat, self.packed, self.group_size, self.scale_and_zero
        )
        y = y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias.to(y.dtype)


def _check(weight: torch.Tensor, group_size: int) -> None:
    """What the kernel takes: CPU, out features a multiple of 16, in features of whole groups."""
    rows, cols = weight.shape
    if weight.device.type != "cpu":
        raise ValueError("int4 quantization runs on CPU only")
    if group_size not in _GROUP_SIZES or cols % group_size or rows % 16:
        raise ValueError(
            f"int4 needs out features divisible by 16 and in features by the group size (one of "
            f"{_GROUP_SIZES}): got [{rows}, {cols}], group {group_size}"
        )
