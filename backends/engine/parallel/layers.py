"""Megatron-style tensor-parallel layers: each rank holds a slice of a weight and the layer's collective
puts the results back together.

- ``ColumnParallelLinear``: a slice of the output rows of each stacked matrix (q|k|v, gate|up); the
  output stays split (each rank goes on with its own heads or MLP columns), no communication.
- ``RowParallelLinear``: the matching slice of the input columns (o_proj, down_proj); each rank's
  partial product is summed by an all-reduce, and the bias is added by tensor rank 0 only.
- ``VocabParallelEmbedding``: a slice of the vocabulary's rows; a token outside the slice looks up
  zeros, and the all-reduce leaves each token the one row that holds it.
- ``ParallelLMHead``: the same vocabulary slice as output rows; the slices' logits are gathered to tensor
  rank 0 of the stage, and from the last pipeline stage sent on to rank 0, which samples.

Each loads the full checkpoint matrix and keeps its slice (``load_shard``), so the model's loader is the
same for one process and many. GGUF Q4 blocks stay blocks where the slice falls on whole blocks (always
for rows; for columns when the slice is a multiple of 32), else they are dequantized first.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from backends.engine.layers.gguf_blocks import GGUF_BLOCK_BYTES, QuantizedTensor
from backends.engine.layers.linear import MergedLinear
from backends.engine.parallel.group import ParallelGroup

Weight = torch.Tensor | QuantizedTensor


class ColumnParallelLinear(MergedLinear):
    """Stacked output shards, each cut to its rows ``[row_starts[s], row_starts[s] + out_sizes[s])`` of
    the checkpoint matrix (its bias likewise)."""

    def __init__(
        self, in_features: int, out_sizes: list[int], row_starts: list[int], *, bias: bool = False
    ) -> None:
        super().__init__(in_features, out_sizes, bias=bias)
        self.row_starts = list(row_starts)

    def load_shard(self, shard: int, name: str, tensor: Weight) -> None:
        start = self.row_starts[shard]
        super().load_shard(shard, name, take_rows(tensor, start, start + self.out_sizes[shard]))


class RowParallelLinear(MergedLinear):
    """y = sum over tensor ranks of x_r W_r^T (+ b): this rank's ``in_features / size`` input columns,
    all-reduced over the stage's tensor group."""

    def __init__(
        self, in_features: int, out_features: int, group: ParallelGroup, *, bias: bool = False
    ) -> None:
        super().__init__(in_features // group.tp_size, [out_features], bias=bias)
        self.group = group

    def load_shard(self, shard: int, name: str, tensor: Weight) -> None:
        if name == "weight":
            first = self.group.tp_rank * self.in_features
            tensor = take_columns(tensor, first, first + self.in_features)
        elif self.group.tp_rank != 0:  # the sum adds the bias once: tensor rank 0 holds it
            tensor = torch.zeros_like(as_dense(tensor))
        super().load_shard(shard, name, tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.all_reduce(super().forward(x))


class VocabParallelEmbedding(nn.Module):
    """This tensor rank's rows of the embedding (``ParallelLayout.vocab_rows``, zero padded); the other
    ranks' tokens look up zeros here and get their rows from the all-reduce."""

    def __init__(self, vocab_size: int, hidden_size: int, group: ParallelGroup) -> None:
        super().__init__()
        self.group = group
        self.vocab_size = vocab_size
        self.first_row, self.num_rows = group.layout.vocab_rows(vocab_size, group.tp_rank)
        self.weight = nn.Parameter(torch.zeros(self.num_rows, hidden_size), requires_grad=False)

    def load_shard(self, shard: int, name: str, tensor: Weight) -> None:
        """The checkpoint's full [vocab, hidden] matrix: keep this rank's rows (``shard`` is always 0)."""
        del shard
        if name != "weight":
            raise KeyError(f"an embedding has no {name!r}")
        load_vocab_slice(self.weight, tensor, self.first_row, self.vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        local = input_ids - self.first_row
        outside = (local < 0) | (local >= self.num_rows)
        rows = F.embedding(local.masked_fill(outside, 0), self.weight)
        return self.group.all_reduce(rows.masked_fill_(outside.unsqueeze(-1), 0.0))


class ParallelLMHead(MergedLinear):
    """The LM head of the last stage: this tensor rank's vocabulary slice of the logits, gathered to the
    stage's tensor rank 0 (which cuts the padding off) and, when that is not rank 0, sent there. The
    ranks that do not end with the logits return an empty [rows, 0]."""

    def __init__(self, vocab_size: int, hidden_size: int, group: ParallelGroup) -> None:
        first_row, num_rows = group.layout.vocab_rows(vocab_size, group.tp_rank)
        super().__init__(hidden_size, [num_rows])
        self.group = group
        self.vocab_size = vocab_size
        self.first_row = first_row

    def load_shard(self, shard: int, name: str, tensor: Weight) -> None:
        """The checkpoint's full [vocab, hidden] matrix: keep this rank's rows, zero padded."""
        if name != "weight":
            raise KeyError(f"the LM head has no {name!r}")
        rows = as_dense(take_rows(tensor, self.first_row, self.first_row + self.out_sizes[0]))
        padded = torch.zeros(self.out_sizes[0], rows.shape[1], dtype=rows.dtype)
        padded[: rows.shape[0]] = rows
        super().load_shard(shard, name, padded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().forward(x).contiguous()
        group = self.group
        if group.tp_size > 1:
            is_first = group.rank == group.tp_first_rank
            slices = [torch.empty_like(logits) for _ in range(group.tp_size)] if is_first else None
            dist.gather(logits, slices, dst=group.tp_first_rank, group=group.tp_group)
            if slices is None:
                return logits.new_empty(logits.shape[0], 0)
            logits = torch.cat(slices, dim=-1)[:, : self.vocab_size]
        if group.rank != 0:  # the last stage's tensor rank 0: rank 0 samples (it receives them later)
            group.traffic.isend(logits, dst=0)
        return logits


def as_dense(tensor: Weight) -> torch.Tensor:
    return tensor.dequantize() if isinstance(tensor, QuantizedTensor) else tensor


def take_rows(tensor: Weight, start: int, end: int) -> Weight:
    """Rows [start, end) (clipped to the matrix; a bias's elements); GGUF blocks stay blocks."""
    end = min(end, tensor.shape[0])
    if isinstance(tensor, QuantizedTensor):
        return QuantizedTensor(tensor.qtype, (end - start, tensor.shape[1]), tensor.data[start:end])
    return tensor[start:end]


def take_columns(tensor: Weight, start: int, end: int) -> Weight:
    """Columns [start, end); GGUF blocks stay blocks when the cut falls between blocks."""
    if not isinstance(tensor, QuantizedTensor):
        return tensor[:, start:end]
    group = QuantizedTensor.GROUP_SIZE
    if start % group or end % group:
        return tensor.dequantize()[:, start:end]
    block_bytes = GGUF_BLOCK_BYTES[tensor.qtype]
    data = tensor.data[:, start // group * block_bytes : end // group * block_bytes]
    return QuantizedTensor(tensor.qtype, (tensor.shape[0], end - start), data)


def load_vocab_slice(param: nn.Parameter, tensor: Weight, first_row: int, vocab_size: int) -> None:
    """Copy rows [first_row, first_row + len(param)) of the [vocab, hidden] ``tensor`` into ``param``,
    the rows past ``vocab_size`` zeroed."""
    rows = as_dense(take_rows(tensor, first_row, first_row + param.shape[0]))
    if tensor.shape[0] != vocab_size or rows.shape[1:] != param.shape[1:]:
        raise ValueError(f"expected a [{vocab_size}, {param.shape[1]}] matrix, got {tuple(tensor.shape)}")
    param.data.zero_()
    param.data[: rows.shape[0]].copy_(rows)
