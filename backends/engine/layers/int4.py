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

On CUDA the kernel is tinygemm's ``aten._weight_int4pack_mm`` (bf16, Ampere or newer) on the weight
``aten._convert_weight_to_int4pack`` tiles from two values a byte (``pack_nibbles``: even columns in the
high nibble); the quantization, scales and zeros are the CPU's. Shapes it cannot tile, or a build
without it, keep the nibbles and dequantize them for the dense GEMM (``int4_path`` picks).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from backends.engine.layers.gguf_blocks import QuantizedTensor
from backends.engine.layers.weight_kernels import check_device, has_kernel

GROUP_SIZE = 32
"""Input columns per group by default, llama.cpp's Q4 block."""
PACK_ROWS = 64
"""The kernel packs rows 64 at a time: packing 64-row chunks and joining them gives the same bytes,
so the int32 copy the packer wants never spans more than 64 rows."""
_GROUP_SIZES = (32, 64, 128, 256)
CUDA_KERNEL_OP = "aten::_weight_int4pack_mm"
INNER_K_TILES = (8, 4, 2)
"""The CUDA packer's tilings of the input columns, widest first: ``in_features`` must be a multiple of
16 times one of them."""
PATHS = ("cpu", "cuda", "dequantize")
"""How an ``Int4Weight`` computes: the CPU kernel, tinygemm on CUDA, or dequantize then a dense GEMM."""


def int4_path(device: torch.device, out_features: int, in_features: int) -> str:
    """The CPU kernel on the CPU; tinygemm on CUDA where torch has it and the shape tiles (out features
    a multiple of 8, ``cuda_inner_k_tiles`` of the in features); else "dequantize"."""
    if device.type == "cpu":
        return "cpu"
    tiles = cuda_inner_k_tiles(in_features)
    if device.type == "cuda" and has_kernel(CUDA_KERNEL_OP, device) and tiles and out_features % 8 == 0:
        return "cuda"
    return "dequantize"


def cuda_inner_k_tiles(in_features: int) -> int | None:
    """The widest of ``INNER_K_TILES`` whose 16-column tiles cover ``in_features``; None if none does."""
    return next((t for t in INNER_K_TILES if in_features % (t * 16) == 0), None)


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K] values in 0..15 as uint8 [N, K / 2], two a byte, even columns in the high nibble (the
    layout ``aten._convert_weight_to_int4pack`` reads)."""
    return (q[:, ::2] << 4) | q[:, 1::2]


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """``pack_nibbles``' inverse: uint8 [N, K / 2] to uint8 [N, K]."""
    return torch.stack([packed >> 4, packed & 15], dim=-1).reshape(packed.shape[0], -1)


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
    """One linear layer's int4 weight [out, in], packed for its path's kernel (``int4_path``), with bf16
    group scales and zeros, and its bias."""

    def __init__(
        self,
        q: torch.Tensor,
        scale: torch.Tensor,
        zero: torch.Tensor,
        bias: torch.Tensor | None,
        *,
        group_size: int = GROUP_SIZE,
        path: str | None = None,
    ) -> None:
        """``q`` uint8 [N, K] in 0..15; ``scale`` and ``zero`` [N, K / group_size], any float dtype;
        ``path`` one of ``PATHS`` (None: ``int4_path``'s choice for q's device)."""
        _check(q, group_size)
        rows, cols = q.shape
        self.out_features, self.in_features, self.group_size = rows, cols, group_size
        self.path = path or int4_path(q.device, rows, cols)
        if self.path == "cpu":
            self.packed = torch.cat(
                [
                    torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                        q[r : r + PACK_ROWS].to(torch.int32), 1
                    )
                    for r in range(0, rows, PACK_ROWS)
                ]
            )
        elif self.path == "cuda":
            tiles = cuda_inner_k_tiles(cols)
            assert tiles is not None, "int4_path() picks cuda only for columns it tiles"
            self.packed = torch.ops.aten._convert_weight_to_int4pack(pack_nibbles(q.to(torch.uint8)), tiles)
        else:  # dequantize: the nibbles as they are
            self.packed = pack_nibbles(q.to(torch.uint8))
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
    def from_blocks(
        cls, shards: Sequence[QuantizedTensor], bias: torch.Tensor | None, device: torch.device | None = None
    ) -> Int4Weight:
        """The row-wise concatenation of ``shards`` (GGUF Q4_0 / Q4_1), their 4-bit values as they are,
        on ``device`` (default the CPU)."""
        unpacked = [shard.unpack() for shard in shards]
        q = np.concatenate([u[0] for u in unpacked])
        d = np.concatenate([u[1] for u in unpacked])
        m = np.concatenate([u[2] for u in unpacked])
        zero = m + np.float32(8.0) * d  # d q + m = d (q - 8) + (m + 8 d)
        return cls(
            torch.from_numpy(q).to(device),
            torch.from_numpy(d).to(device),
            torch.from_numpy(zero).to(device),
            bias,
            group_size=QuantizedTensor.GROUP_SIZE,
        )

    @property
    def num_weight_bytes(self) -> int:
        """Bytes of the packed 4-bit weight and its scales and zeros."""
        sz = self.scale_and_zero
        return self.packed.numel() * self.packed.element_size() + sz.numel() * sz.element_size()

    def dequantized(self) -> torch.Tensor:
        """W as [out, in] fp32, ``(q - 8) * scale + zero`` (the kernels' read back through x = I)."""
        if self.path == "dequantize":
            return self._weight(torch.float32)
        device = self.packed.device
        if self.path == "cpu":
            eye = torch.eye(self.in_features, dtype=torch.float32)
            sz = self.scale_and_zero.float()
            w_t = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.packed, self.group_size, sz)
        else:  # tinygemm takes bf16 only
            eye = torch.eye(self.in_features, dtype=torch.bfloat16, device=device)
            w_t = torch.ops.aten._weight_int4pack_mm(eye, self.packed, self.group_size, self.scale_and_zero)
        return w_t.t().float().contiguous()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x W^T + b in x's dtype (the kernels' product computed from bf16 activations)."""
        flat = x.reshape(-1, x.shape[-1])
        if self.path == "cpu":
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(
                flat.to(torch.bfloat16), self.packed, self.group_size, self.scale_and_zero
            )
        elif self.path == "cuda":
            y = torch.ops.aten._weight_int4pack_mm(
                flat.to(torch.bfloat16), self.packed, self.group_size, self.scale_and_zero
            )
        else:
            y = F.linear(flat, self._weight(x.dtype))
        y = y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def _weight(self, dtype: torch.dtype) -> torch.Tensor:
        """W [out, in] in ``dtype`` from the nibbles (the dequantize path)."""
        groups = self.in_features // self.group_size
        q = unpack_nibbles(self.packed).view(self.out_features, groups, self.group_size).to(dtype)
        scale = self.scale_and_zero[..., 0].t().to(dtype)[..., None]  # [N, groups, 1]
        zero = self.scale_and_zero[..., 1].t().to(dtype)[..., None]
        return ((q - 8) * scale + zero).view(self.out_features, self.in_features)


def _check(weight: torch.Tensor, group_size: int) -> None:
    """What the kernels take: CPU or CUDA, out features a multiple of 16, in features of whole groups."""
    rows, cols = weight.shape
    check_device(weight.device, "int4")
    if group_size not in _GROUP_SIZES or cols % group_size or rows % 16:
        raise ValueError(
            f"int4 needs out features divisible by 16 and in features by the group size (one of "
            f"{_GROUP_SIZES}): got [{rows}, {cols}], group {group_size}"
        )
