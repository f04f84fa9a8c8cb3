"""The parallel layers' slices (no processes): each rank keeps its rows or columns of the checkpoint's
matrix, GGUF blocks stay blocks where the cut allows, and the ranks' partial products add up to the whole."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from backends.engine.layers.gguf_blocks import GGUF_BLOCK_BYTES, QuantizedTensor
from backends.engine.parallel.group import ParallelGroup, ParallelLayout
from backends.engine.parallel.layers import (
    ColumnParallelLinear,
    ParallelLMHead,
    RowParallelLinear,
    VocabParallelEmbedding,
    take_columns,
    take_rows,
)

TWO = ParallelLayout(tensor_parallel_size=2)


def rank(r: int) -> ParallelGroup:
    """Rank ``r`` of two, without a live process group (the tests never run a collective)."""
    return ParallelGroup(TWO, r, None)


def q4_0(rows: int, cols: int, seed: int = 0) -> QuantizedTensor:
    """Random Q4_0 blocks with finite scales."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, cols // 32, GGUF_BLOCK_BYTES["Q4_0"]), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, size=(rows, cols // 32)).astype(np.float16)
    blocks[..., 0:2] = scales[..., None].view(np.uint8).reshape(rows, cols // 32, 2)
    return QuantizedTensor("Q4_0", (rows, cols), blocks.reshape(rows, -1))


def test_gguf_blocks_are_cut_as_blocks() -> None:
    weight = q4_0(8, 128)
    dense = weight.dequantize()
    rows = take_rows(weight, 2, 6)
    assert isinstance(rows, QuantizedTensor) and torch.equal(rows.dequantize(), dense[2:6])
    columns = take_columns(weight, 64, 128)
    assert isinstance(columns, QuantizedTensor) and torch.equal(columns.dequantize(), dense[:, 64:])
    # a cut inside a block of 32 dequantizes first
    assert torch.equal(torch.as_tensor(take_columns(weight, 48, 96)), dense[:, 48:96])


def test_column_and_row_parallel_products_add_up_to_the_whole() -> None:
    torch.manual_seed(0)
    hidden, inner = 8, 12
    gate, up, down = torch.randn(inner, hidden), torch.randn(inner, hidden), torch.randn(hidden, inner)
    x = torch.randn(3, hidden)
    whole = F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)
    partial = []
    for r in (0, 1):
        half = inner // 2
        gate_up = ColumnParallelLinear(hidden, [half, half], [r * half, r * half])
        gate_up.load_shard(0, "weight", gate)
        gate_up.load_shard(1, "weight", up)
        row = RowParallelLinear(inner, hidden, rank(r), bias=True)
        row.load_shard(0, "weight", down)
        row.load_shard(0, "bias", torch.ones(hidden))
        g, u = F.linear(x, gate_up.weight).split(half, dim=-1)
        partial.append(F.linear(F.silu(g) * u, row.weight, row.bias))  # before the all-reduce
    assert torch.allclose(partial[0] + partial[1], whole + 1.0, atol=1e-5)  # the bias counted once


def test_vocabulary_slices_cover_the_vocabulary_once() -> None:
    torch.manual_seed(0)
    vocab, hidden = 5, 4
    table = torch.randn(vocab, hidden)
    ids = torch.tensor([0, 2, 3, 4])
    rows = torch.zeros(len(ids), hidden)
    heads = []
    for r in (0, 1):
        embedding = VocabParallelEmbedding(vocab, hidden, rank(r))
        embedding.load_shard(0, "weight", table)
        local = ids - embedding.first_row
        inside = (local >= 0) & (local < embedding.num_rows)
        rows[inside] += embedding.weight[local[inside]]  # what the all-reduce sums
        head = ParallelLMHead(vocab, hidden, rank(r))
        head.load_shard(0, "weight", table)
        heads.append(head)
    assert torch.equal(rows, table[ids])
    logits = torch.cat([F.linear(rows, head.weight) for head in heads], dim=-1)  # what the gather joins
    assert logits.shape == (len(ids), 6) and logits[:, vocab:].abs().sum() == 0  # padding: cut off
    assert torch.allclose(logits[:, :vocab], rows @ table.T)
