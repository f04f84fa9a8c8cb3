"""Linear layers whose weight stacks several checkpoint matrices (q|k|v, gate|up) for one matmul."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MergedLinear(nn.Module):
    """y = x W^T (+ b) where W is the row-wise concatenation of ``out_sizes`` shards."""

    def __init__(self, in_features: int, out_sizes: list[int], *, bias: bool = False) -> None:
        super().__init__()
        self.out_sizes = list(out_sizes)
        total = sum(out_sizes)
        self.weight = nn.Parameter(torch.empty(total, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(total), requires_grad=False) if bias else None

    def load_shard(self, shard: int, name: str, tensor: torch.Tensor) -> None:
        """Copy one checkpoint matrix (``name`` is "weight" or "bias") into its rows."""
        start = sum(self.out_sizes[:shard])
        param = self.weight if name == "weight" else self.bias
        assert param is not None, f"{name} given for a layer without it"
        rows = param.data[start : start + self.out_sizes[shard]]
        if rows.shape != tensor.shape:
            raise ValueError(f"shard {shard} {name}: expected {tuple(rows.shape)}, got {tuple(tensor.shape)}")
        rows.copy_(tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)
