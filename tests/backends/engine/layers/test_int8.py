"""INT8 weights: per-channel quantization, the quantized MergedLinear against fp32, the model-level pass, and
the config's validation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.engine.config import EngineConfig
from backends.engine.layers.int8 import Int8Weight, quantize_int8
from backends.engine.layers.linear import MergedLinear
from backends.engine.layers.quantization import quantize_linears
from backends.engine.model_runner import ModelRunner
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory

IN_FEATURES, OUT_SIZES = 64, [48, 16, 16]


def _layer(*, bias: bool = False, dtype: torch.dtype = torch.float32) -> MergedLinear:
    gen = torch.Generator().manual_seed(0)
    layer = MergedLinear(IN_FEATURES, OUT_SIZES, bias=bias)
    for shard, rows in enumerate(OUT_SIZES):
        # one row with an outlier: per-channel scales keep the other rows fine
        layer.load_shard(shard, "weight", torch.randn(rows, IN_FEATURES, generator=gen) * (0.1 + shard))
        if bias:
            layer.load_shard(shard, "bias", torch.randn(rows, generator=gen))
    return layer.to(dtype)


def _rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm())


def test_quantize_int8_is_symmetric_per_output_row() -> None:
    weight = torch.randn(32, 16) * torch.linspace(0.01, 10, 32)[:, None]
    q, scales = quantize_int8(weight)
    assert q.dtype == torch.int8 and q.shape == (32, 16)
    assert scales.dtype == torch.float32 and scales.shape == (32,)
    # each row's largest weight maps to 127
    assert torch.equal(q.abs().amax(dim=1), torch.full((32,), 127, dtype=torch.int8))
    assert q.min() >= -127
    error = (q.float() * scales[:, None] - weight).abs()
    assert torch.all(error <= scales[:, None] / 2 + 1e-6)  # round to nearest: half a step at most


def test_zero_row_gets_zero_weights() -> None:
    weight = torch.zeros(4, 8)
    weight[1] = 1.0
    q, scales = quantize_int8(weight)
    assert torch.all(q[0] == 0) and torch.isfinite(scales).all()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("num_rows", [1, 7, 64, 300])
@pytest.mark.parametrize("prepacked", [False, True])
def test_int8_forward_close_to_fp32(bias: bool, num_rows: int, prepacked: bool) -> None:
    layer = _layer(bias=bias)
    x = torch.randn(num_rows, IN_FEATURES, generator=torch.Generator().manual_seed(1))
    ref = F.linear(x, layer.weight, layer.bias)
    if prepacked:
        layer.prepack(batch_hint=64)
    num_bytes = layer.quantize_int8()

    got = layer(x)
    assert layer.is_int8
    assert got.shape == (num_rows, sum(OUT_SIZES)) and got.dtype == torch.float32
    assert _rel_error(got, ref) < 0.01  # int8 weights and bf16 activations: well under 1%
    assert num_bytes == sum(OUT_SIZES) * IN_FEATURES + sum(OUT_SIZES) * 2
    assert layer.weight.numel() == 0  # the float copy is released
    assert layer.dense_weight().shape == (sum(OUT_SIZES), IN_FEATURES)


def test_int8_keeps_leading_dims_and_bf16_activations() -> None:
    layer = _layer(bias=True)
    x = torch.randn(2, 3, IN_FEATURES, generator=torch.Generator().manual_seed(2))
    ref = F.linear(x, layer.weight, layer.bias)
    layer.quantize_int8()
    assert layer(x).shape == (2, 3, sum(OUT_SIZES))
    assert _rel_error(layer(x), ref) < 0.01
    out_bf16 = layer(x.bfloat16())
    assert out_bf16.dtype == torch.bfloat16 and _rel_error(out_bf16, ref) < 0.02


def test_quantize_twice_is_a_no_op_and_loading_after_is_refused() -> None:
    layer = _layer()
    first = layer.quantize_int8()
    x = torch.randn(3, IN_FEATURES)
    before = layer(x)
    assert layer.quantize_int8() == first
    assert torch.equal(layer(x), before)
    with pytest.raises(RuntimeError, match="packed"):
        layer.load_shard(0, "weight", torch.zeros(48, IN_FEATURES))


def test_int8_weight_refuses_other_devices() -> None:
    with pytest.raises(ValueError, match="CPU"):
        Int8Weight(torch.zeros(2, 2, device="meta"), None)


def test_config_validates_quantization() -> None:
    assert EngineConfig(model="m").quantization is None
    assert EngineConfig(model="m", quantization="int8").quantization == "int8"
    assert EngineConfig(model="m", quantization="int4").quantization == "int4"
    for bad in ("INT8", "int2", "fp8", ""):
        with pytest.raises(ValueError, match="quantization"):
            EngineConfig(model="m", quantization=bad)


def test_quantize_linears_skips_lm_head_and_shrinks_weights(make_engine: EngineFactory) -> None:
    engine = make_engine()
    model = engine.runner.model
    linears = [m for m in model.modules() if isinstance(m, MergedLinear)]
    float_bytes = sum(m.dense_weight().numel() * 4 for m in linears if m is not model.lm_head)

    sizes = quantize_linears(model)
    assert sizes.method == "int8" and sizes.float_bytes == float_bytes
    assert float_bytes / 4 < sizes.quantized_bytes < float_bytes / 3.5  # int8 plus a bf16 scale per row
    assert not model.lm_head.is_int8
    assert all(m.is_int8 for m in linears if m is not model.lm_head)
    assert quantize_linears(model).float_bytes == 0  # already done


def test_runner_quantizes_when_asked(make_engine: EngineFactory) -> None:
    engine = make_engine()
    runner = ModelRunner(engine.runner.model, num_blocks=4, block_size=16, quantization="int8")
    assert runner.weight_bytes is not None and runner.weight_bytes.quantized_bytes > 0
    assert engine.runner.weight_bytes is None


def test_the_engine_config_flag_quantizes_the_model(make_engine: EngineFactory) -> None:
    """``EngineConfig(quantization="int8")`` (the server's ``--quantization int8``) reaches the runner."""
    engine = make_engine(quantization="int8")
    model = engine.runner.model
    assert engine.runner.weight_bytes is not None and engine.runner.weight_bytes.quantized_bytes > 0
    assert all(m.is_int8 for m in model.modules() if isinstance(m, MergedLinear) and m is not model.lm_head)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    assert len(engine.generate([[5, 9, 2, 7]], params)[0].outputs[0].token_ids) == 4


def test_quantized_engine_generates_close_to_fp32(make_engine: EngineFactory) -> None:
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=0)
    prompt = [5, 9, 2, 7, 11, 3]
    fp32, int8 = make_engine(), make_engine()
    quantize_linears(int8.runner.model)
    ref = fp32.generate([prompt], params)[0].outputs[0]
    got = int8.generate([prompt], params)[0].outputs[0]
    assert len(got.token_ids) == 6
    ref_lp = [chosen.logprob for chosen, _ in ref.logprobs or []]
    got_lp = [chosen.logprob for chosen, _ in got.logprobs or []]
    assert got.token_ids[0] == ref.token_ids[0]
    assert got_lp[0] == pytest.approx(ref_lp[0], abs=0.05)
