"""Linear layers whose weight stacks several checkpoint matrices (q|k|v, gate|up) for one matmul."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backends.engine.kernels import cpu_kernels_enabled
from backends.engine.layers.quantization import Int8Weight


class MergedLinear(nn.Module):
    """y = x W^T (+ b) where W is the row-wise concatenation of ``out_sizes`` shards.

    On CPU, ``prepack()`` reorders W once into oneDNN's blocked layout: MKL's sgemm otherwise repacks
    the whole weight on every call, which at decode sizes (tens of rows) costs as much as the math
    (SmolLM2's layers 29% faster at 64 rows, its LM head 43%). bf16 weights are packed too where
    oneDNN has bf16 kernels for the CPU: unpacked, oneDNN's bf16 matmul re-blocks the plain W in
    every call (layers 1.6-2.4x slower at 16-64 rows).
    """

    def __init__(self, in_features: int, out_sizes: list[int], *, bias: bool = False) -> None:
        super().__init__()
        self.out_sizes = list(out_sizes)
        total = sum(out_sizes)
        self.weight = nn.Parameter(torch.empty(total, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(total), requires_grad=False) if bias else None
        self._packed: torch.Tensor | None = None
        self._int8: Int8Weight | None = None

    def load_shard(self, shard: int, name: str, tensor: torch.Tensor) -> None:
        """Copy one checkpoint matrix (``name`` is "weight" or "bias") into its rows."""
        if self._packed is not None or self._int8 is not None:
            raise RuntimeError("weights are packed: load before prepack() or quantize_int8()")
        start = sum(self.out_sizes[:shard])
        param = self.weight if name == "weight" else self.bias
        assert param is not None, f"{name} given for a layer without it"
        rows = param.data[start : start + self.out_sizes[shard]]
        if rows.shape != tensor.shape:
            raise ValueError(f"shard {shard} {name}: expected {tuple(rows.shape)}, got {tuple(tensor.shape)}")
        rows.copy_(tensor)

    def prepack(self, batch_hint: int, *, keep_dense: bool = False) -> bool:
        """Reorder the weight for oneDNN (CPU; float32, or bfloat16 where the CPU has oneDNN's bf16
        kernels); False where that is not available.

        The dense weight is released unless ``keep_dense`` (a weight shared with another module, such
        as tied embeddings); ``dense_weight()`` still returns it either way.
        """
        weight = self.weight.data
        if not cpu_kernels_enabled() or weight.device.type != "cpu" or not _is_packable(weight.dtype):
            return False
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
        if self._int8 is None:
            self._int8 = Int8Weight(self.dense_weight(), self.bias)
            self._packed = None
            self.weight.data = torch.empty(0, dtype=self.weight.dtype, device=self.weight.device)
        return self._int8.num_weight_bytes

    @property
    def is_int8(self) -> bool:
        return self._int8 is not None

    def dense_weight(self) -> torch.Tensor:
        """W as [out, in], packed or not (dequantized, in fp32, when int8)."""
        if self._int8 is not None:
            return self._int8.dequantized()
        if self._packed is not None and self.weight.numel() == 0:
            return self._packed.to_dense()
        return self.weight.data

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._int8 is not None:
            return self._int8.matmul(x)
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
