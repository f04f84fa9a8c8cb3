"""Linear layers whose weight stacks several checkpoint matrices (q|k|v, gate|up) for one matmul."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backends.engine.kernels import cpu_kernels_enabled
from backends.engine.layers.gguf_blocks import QuantizedTensor
from backends.engine.layers.int4 import GROUP_SIZE, Int4Weight
from backends.engine.layers.int8 import Int8Weight


class MergedLinear(nn.Module):
    """y = x W^T (+ b) where W is the row-wise concatenation of ``out_sizes`` shards.

    On CPU, ``prepack()`` reorders W once into oneDNN's blocked layout: MKL's sgemm otherwise repacks
    the whole weight on every call, which at decode sizes (tens of rows) costs as much as the math
    (SmolLM2's layers 29% faster at 64 rows, its LM head 43%). bf16 weights are packed too where
    oneDNN has bf16 kernels for the CPU: unpacked, oneDNN's bf16 matmul re-blocks the plain W in
    every call (layers 1.6-2.4x slower at 16-64 rows).

    A shard may arrive as GGUF blocks (``QuantizedTensor``): they are kept as they are until the layer
    knows its form. ``quantize_int4`` packs them without a float copy; anything else
    (``dequantize_blocks`` at the runner's start, ``dense_weight``, ``quantize_int8``, a first forward)
    dequantizes them once into W, and a ``prepack`` asked for in between runs then.
    """

    def __init__(self, in_features: int, out_sizes: list[int], *, bias: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_sizes = list(out_sizes)
        total = sum(out_sizes)
        self.weight = nn.Parameter(torch.empty(total, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(total), requires_grad=False) if bias else None
        self._packed: torch.Tensor | None = None
        self._int8: Int8Weight | None = None
        self._int4: Int4Weight | None = None
        self._blocks: dict[int, QuantizedTensor] = {}
        """Weight shards still in their checkpoint blocks, by shard index."""
        self._deferred_prepack: tuple[int, bool] | None = None

    def load_shard(self, shard: int, name: str, tensor: torch.Tensor | QuantizedTensor) -> None:
        """Copy one checkpoint matrix (``name`` is "weight" or "bias") into its rows; a weight in GGUF
        blocks is kept as blocks (see the class)."""
        if self.is_quantized or self._packed is not None or self._deferred_prepack is not None:
            raise RuntimeError("weights are packed: load before prepack() or quantize_*()")
        if isinstance(tensor, QuantizedTensor) and name != "weight":
            raise ValueError(f"shard {shard} {name}: only weights come as blocks")
        start = sum(self.out_sizes[:shard])
        param = self.weight if name == "weight" else self.bias
        assert param is not None, f"{name} given for a layer without it"
        rows = param.data[start : start + self.out_sizes[shard]]
        if rows.shape != tuple(tensor.shape):
            raise ValueError(f"shard {shard} {name}: expected {tuple(rows.shape)}, got {tuple(tensor.shape)}")
        if isinstance(tensor, QuantizedTensor):
            self._blocks[shard] = tensor
            return
        if name == "weight":
            self._blocks.pop(shard, None)  # floats loaded over blocks replace them
        rows.copy_(tensor)

    def dequantize_blocks(self) -> None:
        """Write the shards still in blocks into W (and run a prepack asked for meanwhile); a no-op when
        none are."""
        for shard, blocks in sorted(self._blocks.items()):
            start = sum(self.out_sizes[:shard])
            self.weight.data[start : start + self.out_sizes[shard]].copy_(blocks.dequantize())
        self._blocks.clear()
        if self._deferred_prepack is not None:
            batch_hint, keep_dense = self._deferred_prepack
            self._deferred_prepack = None
            self.prepack(batch_hint, keep_dense=keep_dense)

    def prepack(self, batch_hint: int, *, keep_dense: bool = False) -> bool:
        """Reorder the weight for oneDNN (CPU; float32, or bfloat16 where the CPU has oneDNN's bf16
        kernels); False where that is not available.

        The dense weight is released unless ``keep_dense`` (a weight shared with another module, such
        as tied embeddings); ``dense_weight()`` still returns it either way.
        """
        weight = self.weight.data
        if not cpu_kernels_enabled() or weight.device.type != "cpu" or not _is_packable(weight.dtype):
            return False
        if self._blocks:  # when the blocks are dequantized, unless int4 takes them as they are
            self._deferred_prepack = (batch_hint, keep_dense)
            return True
        try:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint)
        except (RuntimeError, AttributeError):  # a torch built without oneDNN, or a CPU it rejects
            return False
        if not keep_dense:
            self.weight.data = torch.empty(0, dtype=weight.dtype, device=weight.device)
        return True

    def quantize_int8(self) -> int:
        """Replace W (dense or packed) by per-output-channel int8 with bf16 scales; returns the bytes of
        the int8 weight and its scales. The dense and packed copies are released."""
        if self._int4 is not None:
            raise RuntimeError("already int4")
        if self._int8 is None:
            self._deferred_prepack = None  # W is about to go: no point reordering it
            self._int8 = Int8Weight(self.dense_weight(), self.bias)
            self._release_float()
        return self._int8.num_weight_bytes

    def quantize_int4(self, group_size: int = GROUP_SIZE) -> int:
        """Replace W by group-wise asymmetric int4 (bf16 scales and zeros per ``group_size`` input
        columns); returns the bytes of the packed weight, scales and zeros. Shards still in GGUF Q4
        blocks of 32 keep their 4-bit values when every shard is; else W is quantized from floats."""
        if self._int8 is not None:
            raise RuntimeError("already int8")
        if self._int4 is None:
            self._deferred_prepack = None  # W is about to go: no point reordering it
            if len(self._blocks) == len(self.out_sizes) and group_size == QuantizedTensor.GROUP_SIZE:
                blocks = [self._blocks[shard] for shard in range(len(self.out_sizes))]
                # the file's own values
                self._int4 = Int4Weight.from_blocks(blocks, self.bias, self.weight.device)
                self._blocks.clear()
            else:
                self._int4 = Int4Weight.from_float(self.dense_weight(), self.bias, group_size)
            self._release_float()
        return self._int4.num_weight_bytes

    def _release_float(self) -> None:
        self._packed = None
        self.weight.data = torch.empty(0, dtype=self.weight.dtype, device=self.weight.device)

    @property
    def is_int8(self) -> bool:
        return self._int8 is not None

    @property
    def is_int4(self) -> bool:
        return self._int4 is not None

    @property
    def is_quantized(self) -> bool:
        return self._int8 is not None or self._int4 is not None

    @property
    def num_float_weight_bytes(self) -> int:
        """Bytes of W in the layer's float dtype, whatever form it is held in now."""
        return sum(self.out_sizes) * self.in_features * self.weight.element_size()

    def dense_weight(self) -> torch.Tensor:
        """W as [out, in], packed or not (dequantized, in fp32, when int8 or int4)."""
        if self._int8 is not None:
            return self._int8.dequantized()
        if self._int4 is not None:
            return self._int4.dequantized()
        if self._blocks:
            self.dequantize_blocks()
        if self._packed is not None and self.weight.numel() == 0:
            return self._packed.to_dense()
        return self.weight.data

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._int4 is not None:
            return self._int4.matmul(x)
        if self._int8 is not None:
            return self._int8.matmul(x)
        if self._blocks:  # the first forward of a layer loaded from blocks
            self.dequantize_blocks()
        if self._packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def _is_packable(dtype: torch.dtype) -> bool:
    """oneDNN runs fp32 everywhere; bf16 only on CPUs it has bf16 kernels for (AVX-512 or newer):
    elsewhere it would emulate, and F.linear's path is left as it is."""
    if dtype == torch.float32:
        return True
    if dtype != torch.bfloat16:
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (RuntimeError, AttributeError):  # a torch built without oneDNN
        return False
