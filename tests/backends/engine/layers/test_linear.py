"""MergedLinear: shard loading, and prepacking for oneDNN in fp32 and bf16 against the dense F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.engine.layers.linear import MergedLinear, _is_packable

IN_FEATURES, OUT_SIZES = 64, [48, 16, 16]  # q|k|v-shaped shards


def _layer(dtype: torch.dtype, *, bias: bool = False, seed: int = 0) -> MergedLinear:
    gen = torch.Generator().manual_seed(seed)
    layer = MergedLinear(IN_FEATURES, OUT_SIZES, bias=bias)
    for shard, rows in enumerate(OUT_SIZES):
        layer.load_shard(shard, "weight", torch.randn(rows, IN_FEATURES, generator=gen) * 0.1)
        if bias:
            layer.load_shard(shard, "bias", torch.randn(rows, generator=gen))
    return layer.to(dtype)


def _needs_bf16_kernels() -> None:
    if not _is_packable(torch.bfloat16):
        pytest.skip("oneDNN has no bf16 kernels for this CPU: bf16 stays unpacked")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("num_rows", [1, 7, 64, 300])
def test_packed_forward_matches_dense(dtype: torch.dtype, bias: bool, num_rows: int) -> None:
    if dtype == torch.bfloat16:
        _needs_bf16_kernels()
    layer = _layer(dtype, bias=bias)
    x = torch.randn(num_rows, IN_FEATURES, generator=torch.Generator().manual_seed(1)).to(dtype)
    dense = F.linear(x, layer.weight, layer.bias)

    assert layer.prepack(batch_hint=64)
    packed = layer(x)

    assert packed.dtype == dtype and packed.shape == (num_rows, sum(OUT_SIZES))
    # both accumulate in fp32; bf16 rounds the result once
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(packed, dense, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prepack_releases_the_dense_weight_but_dense_weight_still_returns_it(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16:
        _needs_bf16_kernels()
    layer = _layer(dtype)
    original = layer.weight.data.clone()

    assert layer.prepack(batch_hint=64)

    assert layer.weight.numel() == 0
    assert torch.equal(layer.dense_weight(), original)
    with pytest.raises(RuntimeError, match="packed"):
        layer.load_shard(0, "weight", original[:48])


def test_keep_dense_keeps_the_weight_for_a_tied_embedding() -> None:
    _needs_bf16_kernels()
    layer = _layer(torch.bfloat16)
    original = layer.weight.data.clone()

    assert layer.prepack(batch_hint=64, keep_dense=True)

    assert torch.equal(layer.weight.data, original)
    assert torch.equal(layer.dense_weight(), original)


def test_float16_stays_unpacked() -> None:
    layer = _layer(torch.float16)

    assert not layer.prepack(batch_hint=64)
    assert layer.weight.numel() == IN_FEATURES * sum(OUT_SIZES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_kernels_off_leaves_weights_unpacked(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SORTYARD_CPU_KERNELS", "0")
    layer = _layer(dtype)

    assert not layer.prepack(batch_hint=64)
    assert layer.weight.numel() == IN_FEATURES * sum(OUT_SIZES)
