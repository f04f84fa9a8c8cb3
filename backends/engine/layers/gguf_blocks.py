"""The quantized blocks a checkpoint can hand over: a GGUF's Q4_0 / Q4_1 GEMM weights, as the file holds them.

The loader yields such weights as ``QuantizedTensor`` (the raw blocks, no float copy),
``MergedLinear.load_shard`` keeps them, and int4 (``int4.py``) packs the very values the file holds; any
other use dequantizes them once, to the same floats the loader used to produce. Turning a model's GEMMs
to int8 or int4 is ``quantization.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

GGUF_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20}
"""llama.cpp formats handed over as blocks: bytes per block of 32 weights (fp16 d, [fp16 m], 16 bytes of
nibbles)."""
DEQUANT_CHUNK_ELEMENTS = 1 << 22
"""Weights dequantized at a time: bounds the temporaries beside the float result."""


@dataclass(frozen=True)
class QuantizedTensor:
    """A [rows, cols] weight as llama.cpp Q4_0 or Q4_1 blocks along each row, 32 input columns a block.

    Q4_1 block: fp16 d, fp16 m, 16 bytes of 4-bit q: ``w = d * q + m``. Q4_0: fp16 d, 16 bytes:
    ``w = d * (q - 8)``. Byte j of a block holds weight j (low nibble) and weight j + 16 (high). Rows are
    whole blocks, so permuting rows (``unpermute_qk``) works on ``data`` as it is.
    """

    GROUP_SIZE: ClassVar[int] = 32

    qtype: str
    """"Q4_0" or "Q4_1"."""
    shape: tuple[int, int]
    data: np.ndarray
    """uint8 [rows, cols // 32 * block bytes], typically a view of the GGUF's memory map."""

    def __post_init__(self) -> None:
        if self.qtype not in GGUF_BLOCK_BYTES:
            raise ValueError(f"unsupported block format {self.qtype!r}")
        rows, cols = self.shape
        expected = (rows, cols // self.GROUP_SIZE * GGUF_BLOCK_BYTES[self.qtype])
        if cols % self.GROUP_SIZE or self.data.dtype != np.uint8 or self.data.shape != expected:
            raise ValueError(
                f"{self.qtype} {self.shape}: expected uint8 blocks {expected}, got {self.data.shape}"
            )

    def to(self, dtype: torch.dtype) -> QuantizedTensor:
        """Itself: a loader's cast of every tensor passes through; dequantizing writes the layer's dtype."""
        del dtype
        return self

    def unpack(self, start: int = 0, end: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows [start, end) as (q uint8 [r, cols] in 0..15, d and m fp32 [r, cols // 32]) with
        ``w = d * q + m`` per block (Q4_0: ``m = -8 d``, exact in fp32)."""
        blocks = self.data[start:end]
        rows, cols = blocks.shape[0], self.shape[1]
        blocks = blocks.reshape(rows, cols // self.GROUP_SIZE, GGUF_BLOCK_BYTES[self.qtype])
        d = _fp16(blocks[..., 0:2])
        if self.qtype == "Q4_1":
            m, nibbles = _fp16(blocks[..., 2:4]), blocks[..., 4:]
        else:
            m, nibbles = d * np.float32(-8.0), blocks[..., 2:]
        q = np.concatenate([nibbles & np.uint8(0x0F), nibbles >> np.uint8(4)], axis=-1)
        return q.reshape(rows, cols), d, m

    def dequantize(self) -> torch.Tensor:
        """fp32 [rows, cols], bit for bit what ``gguf.quants.dequantize`` gives (``d * q + m`` in fp32)."""
        rows, cols = self.shape
        out = np.empty((rows, cols), dtype=np.float32)
        step = max(1, DEQUANT_CHUNK_ELEMENTS // cols)
        for start in range(0, rows, step):
            q, d, m = self.unpack(start, start + step)
            groups = q.reshape(q.shape[0], -1, self.GROUP_SIZE).astype(np.float32)
            out[start : start + step] = (groups * d[..., None] + m[..., None]).reshape(q.shape)
        return torch.from_numpy(out)


def _fp16(pairs: np.ndarray) -> np.ndarray:
    """[..., 2] little-endian byte pairs -> fp32 [...] through fp16."""
    return np.ascontiguousarray(pairs).view(np.float16)[..., 0].astype(np.float32)
