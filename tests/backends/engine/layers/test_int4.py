"""INT4 weights: group-wise quantization, the packed kernel against the dequantized reference, the int4
MergedLinear against fp32, and the model-level pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.engine.layers.int4 import Int4Weight, quantize_int4
from backends.engine.layers.linear import MergedLinear
from backends.engine.layers.quantization import quantize_linears
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory

IN_FEATURES, OUT_SIZES = 128, [64, 32, 32]


def _layer(*, bias: bool = False) -> MergedLinear:
    gen = torch.Generator().manual_seed(0)
    layer = MergedLinear(IN_FEATURES, OUT_SIZES, bias=bias)
    for shard, rows in enumerate(OUT_SIZES):
        layer.load_shard(shard, "weight", torch.randn(rows, IN_FEATURES, generator=gen) * (0.1 + shard))
        if bias:
            layer.load_shard(shard, "bias", torch.randn(rows, generator=gen))
    return layer


def _rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm())


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_quantize_int4_is_asymmetric_per_group(group_size: int) -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(16, 256, generator=gen) + torch.linspace(-3, 3, 256)  # groups off zero
    q, scale, zero = quantize_int4(weight, group_size)
    assert q.dtype == torch.uint8 and q.shape == (16, 256) and int(q.max()) <= 15
    assert scale.dtype == zero.dtype == torch.bfloat16 and scale.shape == (16, 256 // group_size)
    w = (q.float().reshape(16, -1, group_size) - 8) * scale.float()[..., None] + zero.float()[..., None]
    error = (w.reshape(16, 256) - weight).reshape(16, -1, group_size).abs()
    # round to nearest against the stored bf16 scale and zero: half a step, plus the bf16 rounding slack
    assert torch.all(error <= scale.float()[..., None] * 0.6 + 1e-6)
    # the groups' extremes are reached (min near 0, max near 15)
    assert int(q.min()) == 0 and int(q.max()) == 15


def test_kernel_matches_the_dequantized_weight() -> None:
    """The packed kernel computes x @ ((q - 8) * scale + zero)^T: against that weight in fp32."""
    gen = torch.Generator().manual_seed(1)
    layer = Int4Weight.from_float(torch.randn(96, 256, generator=gen) * 0.05, None)
    w = layer.dequantized()
    assert w.shape == (96, 256) and w.dtype == torch.float32
    for rows in (1, 5, 64, 200):
        x = torch.randn(rows, 256, generator=gen)
        ref = x.bfloat16().float() @ w.t()  # the kernel reads bf16 activations
        assert _rel_error(layer.matmul(x), ref) < 2e-3


def test_packing_by_64_row_chunks_is_packing_whole() -> None:
    q = torch.randint(0, 16, (160, 64), dtype=torch.int32, generator=torch.Generator().manual_seed(2))
    whole = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    layer = Int4Weight(q.to(torch.uint8), torch.ones(160, 2), torch.zeros(160, 2), None)
    assert torch.equal(layer.packed, whole)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("num_rows", [1, 7, 64, 300])
@pytest.mark.parametrize("prepacked", [False, True])
def test_int4_forward_close_to_fp32(bias: bool, num_rows: int, prepacked: bool) -> None:
    layer = _layer(bias=bias)
    x = torch.randn(num_rows, IN_FEATURES, generator=torch.Generator().manual_seed(1))
    ref = F.linear(x, layer.weight, layer.bias)
    if prepacked:
        layer.prepack(batch_hint=64)
    num_bytes = layer.quantize_int4()

    got = layer(x)
    assert layer.is_int4 and layer.is_quantized and not layer.is_int8
    assert got.shape == (num_rows, sum(OUT_SIZES)) and got.dtype == torch.float32
    assert _rel_error(got, ref) < 0.1  # 16 levels per group of 32: ~6% on Gaussian weights
    num_groups = sum(OUT_SIZES) * IN_FEATURES // 32
    assert num_bytes == sum(OUT_SIZES) * IN_FEATURES // 2 + num_groups * 2 * 2  # nibbles, bf16 scale+zero
    assert layer.weight.numel() == 0  # the float copy is released
    assert layer.dense_weight().shape == (sum(OUT_SIZES), IN_FEATURES)


def test_int4_keeps_leading_dims_and_bf16_activations() -> None:
    layer = _layer(bias=True)
    x = torch.randn(2, 3, IN_FEATURES, generator=torch.Generator().manual_seed(2))
    ref = F.linear(x, layer.weight, layer.bias)
    layer.quantize_int4()
    assert layer(x).shape == (2, 3, sum(OUT_SIZES))
    assert _rel_error(layer(x), ref) < 0.1
    out_bf16 = layer(x.bfloat16())
    assert out_bf16.dtype == torch.bfloat16 and _rel_error(out_bf16, ref) < 0.1


def test_quantize_twice_is_a_no_op_and_other_methods_are_refused() -> None:
    layer = _layer()
    first = layer.quantize_int4()
    x = torch.randn(3, IN_FEATURES)
    before = layer(x)
    assert layer.quantize_int4() == first
    assert torch.equal(layer(x), before)
    with pytest.raises(RuntimeError, match="int4"):
        layer.quantize_int8()
    with pytest.raises(RuntimeError, match="packed"):
        layer.load_shard(0, "weight", torch.zeros(64, IN_FEATURES))


def test_shapes_the_kernel_cannot_take_are_refused() -> None:
    with pytest.raises(ValueError, match="divisible"):
        Int4Weight.from_float(torch.zeros(24, 64), None)  # 24 rows: not a multiple of 16
    with pytest.raises(ValueError, match="divisible"):
        Int4Weight.from_float(torch.zeros(16, 48), None)  # 48 columns: not whole groups of 32
    with pytest.raises(ValueError, match="CPU"):
        Int4Weight.from_float(torch.zeros(16, 64, device="meta"), None)


def test_quantize_linears_int4_skips_lm_head_and_shrinks_weights(make_engine: EngineFactory) -> None:
    engine = make_engine()
    model = engine.runner.model
    linears = [m for m in model.modules() if isinstance(m, MergedLinear) and m is not model.lm_head]
    float_bytes = sum(m.dense_weight().numel() * 4 for m in linears)

    sizes = quantize_linears(model, "int4")
    assert sizes.method == "int4" and sizes.float_bytes == float_bytes
    # half a byte a weight plus a bf16 scale and zero per 32: 8 / (4 + 1/8) of the fp32 bytes less
    assert sizes.quantized_bytes == pytest.approx(float_bytes / 8 * (1 + 1 / 4), rel=1e-6)
    assert not model.lm_head.is_quantized
    assert all(m.is_int4 for m in linears)
    assert quantize_linears(model, "int4").float_bytes == 0  # already done
    with pytest.raises(ValueError, match="int2"):
        quantize_linears(model, "int2")


def test_the_engine_config_flag_quantizes_the_model_to_int4(make_engine: EngineFactory) -> None:
    """``EngineConfig(quantization="int4")`` (the server's ``--quantization int4``) reaches the runner, and
    greedy output stays close to fp32's on the tiny model."""
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=0)
    ref = make_engine().generate([[5, 9, 2, 7]], params)[0].outputs[0]
    engine = make_engine(quantization="int4")
    model = engine.runner.model
    assert engine.runner.weight_bytes is not None and engine.runner.weight_bytes.method == "int4"
    assert all(m.is_int4 for m in model.modules() if isinstance(m, MergedLinear) and m is not model.lm_head)
    out = engine.generate([[5, 9, 2, 7]], params)[0].outputs[0]
    assert len(out.token_ids) == 4
    assert out.token_ids[0] == ref.token_ids[0]
