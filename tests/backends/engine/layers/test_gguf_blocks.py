"""GGUF Q4_0 / Q4_1 blocks handed to the layers (``QuantizedTensor``): their floats are gguf's own, and
int4 packs their 4-bit values as they are, to the same weights as the float path up to the bf16 rounding
of the scales and zeros."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from backends.engine.layers.gguf_blocks import QuantizedTensor
from backends.engine.layers.int4 import Int4Weight
from backends.engine.layers.linear import MergedLinear

IN_FEATURES, OUT_SIZES = 96, [64, 32, 32]
Q4 = [GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1]


def _blocks(rows: int, qtype: GGMLQuantizationType, seed: int) -> tuple[QuantizedTensor, torch.Tensor]:
    """Random weights quantized by gguf's reference code, and the floats they dequantize to."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, IN_FEATURES)) * 0.05 + rng.uniform(-0.05, 0.05, (rows, 1))).astype(
        np.float32
    )
    raw = quantize(w, qtype)
    return QuantizedTensor(qtype.name, (rows, IN_FEATURES), raw), torch.from_numpy(dequantize(raw, qtype))


def _bf16_exact_blocks(rows: int, qtype: GGMLQuantizationType, seed: int) -> QuantizedTensor:
    """Blocks whose d, and m + 8 d, are bf16 numbers: the int4 path then holds the very same weights."""
    rng = np.random.default_rng(seed)
    groups = rows * IN_FEATURES // 32
    d = (rng.integers(1, 16, groups) * 2.0**-9).astype(np.float16)
    q = rng.integers(0, 16, (groups, 32)).astype(np.uint8)
    nibbles = q[:, :16] | (q[:, 16:] << 4)
    parts = [d.reshape(-1, 1).view(np.uint8)]
    if qtype == GGMLQuantizationType.Q4_1:
        m = (-8.0 * d.astype(np.float32) + rng.integers(-8, 8, groups) * 2.0**-8).astype(np.float16)
        parts.append(m.reshape(-1, 1).view(np.uint8))
    raw = np.concatenate([*parts, nibbles], axis=1).reshape(rows, -1)
    return QuantizedTensor(qtype.name, (rows, IN_FEATURES), raw)


@pytest.mark.parametrize("qtype", Q4)
def test_dequantize_is_gguf_bit_for_bit(qtype: GGMLQuantizationType) -> None:
    blocks, ref = _blocks(40, qtype, seed=0)
    assert torch.equal(blocks.dequantize(), ref)
    assert blocks.to(torch.bfloat16) is blocks  # the engine's cast passes through


def test_malformed_blocks_are_refused() -> None:
    with pytest.raises(ValueError, match="Q4_1"):
        QuantizedTensor("Q4_1", (2, 64), np.zeros((2, 36), dtype=np.uint8))  # Q4_0's 18 bytes a block
    with pytest.raises(ValueError, match="Q8_0"):
        QuantizedTensor("Q8_0", (2, 64), np.zeros((2, 68), dtype=np.uint8))


@pytest.mark.parametrize("qtype", Q4)
def test_int4_from_blocks_holds_the_files_weights(qtype: GGMLQuantizationType) -> None:
    blocks = _bf16_exact_blocks(48, qtype, seed=1)
    assert torch.equal(Int4Weight.from_blocks([blocks], None).dequantized(), blocks.dequantize())
    # any scales: the same weights up to the bf16 rounding of d (8 of its 11 bits) and of m + 8 d
    blocks, ref = _blocks(48, qtype, seed=2)
    step = ref.reshape(48, -1, 32).amax(-1) - ref.reshape(48, -1, 32).amin(-1)
    error = (Int4Weight.from_blocks([blocks], None).dequantized() - ref).reshape(48, -1, 32).abs().amax(-1)
    assert torch.all(error <= step * 2**-7 + ref.abs().reshape(48, -1, 32).amax(-1) * 2**-8 + 1e-7)


def merged_layer(
    qtypes: list[GGMLQuantizationType], *, bias: bool = False
) -> tuple[MergedLinear, torch.Tensor]:
    layer = MergedLinear(IN_FEATURES, OUT_SIZES, bias=bias)
    floats = []
    for shard, (rows, qtype) in enumerate(zip(OUT_SIZES, qtypes, strict=True)):
        blocks = _bf16_exact_blocks(rows, qtype, seed=10 + shard)
        layer.load_shard(shard, "weight", blocks)
        floats.append(blocks.dequantize())
        if bias:
            layer.load_shard(shard, "bias", torch.full((rows,), 0.5))
    return layer, torch.cat(floats)


@pytest.mark.parametrize("qtypes", [[Q4[1]] * 3, [Q4[1], Q4[0], Q4[1]]])
def test_merged_layer_packs_blocks_without_a_float_copy(qtypes: list[GGMLQuantizationType]) -> None:
    layer, ref = merged_layer(qtypes, bias=True)
    assert layer.prepack(batch_hint=16)  # deferred: the blocks are not dequantized for it
    num_bytes = layer.quantize_int4()
    assert layer.is_int4 and layer.weight.numel() == 0
    assert num_bytes == ref.numel() // 2 + ref.numel() // 32 * 4
    assert torch.equal(layer.dense_weight(), ref)  # the file's weights, exactly
    x = torch.randn(5, IN_FEATURES, generator=torch.Generator().manual_seed(3))
    expected = F.linear(x.bfloat16().float(), ref, layer.bias)
    assert float((layer(x) - expected).norm() / expected.norm()) < 2e-3


def test_blocks_dequantize_once_on_any_other_use() -> None:
    layer, ref = merged_layer([Q4[1]] * 3)
    x = torch.randn(4, IN_FEATURES, generator=torch.Generator().manual_seed(4))
    assert layer.prepack(batch_hint=16)
    out = layer(x)  # the first forward dequantizes, then runs the deferred prepack
    assert torch.allclose(out, x @ ref.t(), atol=1e-5)
    assert torch.equal(layer.dense_weight(), ref)
    with pytest.raises(RuntimeError, match="packed"):
        layer.load_shard(0, "weight", torch.zeros(64, IN_FEATURES))


def test_int8_and_mixed_shards_take_the_float_path() -> None:
    layer, ref = merged_layer([Q4[1]] * 3)
    layer.quantize_int8()
    assert torch.allclose(layer.dense_weight(), ref, atol=float(ref.abs().max()) / 127)
    mixed = MergedLinear(IN_FEATURES, OUT_SIZES)
    floats = []
    for shard, rows in enumerate(OUT_SIZES):
        blocks = _bf16_exact_blocks(rows, Q4[1], seed=20 + shard)
        floats.append(blocks.dequantize())
        mixed.load_shard(shard, "weight", floats[-1] if shard == 1 else blocks)  # one shard as floats
    mixed.quantize_int4()
    error = (mixed.dense_weight() - torch.cat(floats)).abs().max()
    assert 0 < error < 15 * 2**-9  # requantized from floats, within a block step: not the file's values


def test_blocks_are_weights_of_the_right_shape() -> None:
    layer = MergedLinear(IN_FEATURES, OUT_SIZES, bias=True)
    blocks = _bf16_exact_blocks(32, Q4[0], seed=5)
    with pytest.raises(ValueError, match="expected"):
        layer.load_shard(0, "weight", blocks)  # shard 0 has 64 rows
    with pytest.raises(ValueError, match="only weights"):
        layer.load_shard(1, "bias", blocks)
