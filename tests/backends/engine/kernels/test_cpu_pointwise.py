"""The fused pointwise kernels (gated activation, residual add + RMSNorm, rotary) against the torch ops
of the layers they stand in for: fp32 to float rounding; bf16 identical but where a differently ordered
fp32 sum crosses a rounding boundary (one bf16 step, two where a rounded value is multiplied again)."""

from __future__ import annotations

import pytest
import torch

from backends.engine.kernels import cpu_pointwise
from backends.engine.layers.activation import SiluAndMul
from backends.engine.layers.norm import RMSNorm
from backends.engine.layers.rotary import RotaryEmbedding

DTYPES = [torch.float32, torch.bfloat16]
ROWS = [1, 7, 2048]  # 2048 rows split over threads


@pytest.fixture(scope="module")
def kernel() -> cpu_pointwise.CpuPointwise:
    loaded = cpu_pointwise.load()
    if loaded is None:
        pytest.skip("no C compiler here: the layers run their torch ops")
    return loaded


def assert_matches(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype == torch.float32:
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        return
    # bf16: the same roundings as torch; a differently ordered fp32 sum may cross a rounding boundary
    step = ref.float().abs().clamp_min(1e-30) * 2**-6
    assert bool(((got.float() - ref.float()).abs() <= step).all())
    assert (got != ref).float().mean().item() < 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
def test_silu_and_mul(kernel: cpu_pointwise.CpuPointwise, dtype: torch.dtype, rows: int) -> None:
    x = (torch.randn(rows, 2 * 1536, generator=torch.Generator().manual_seed(rows)) * 4).to(dtype)
    x[0, :4] = torch.tensor([-100.0, 100.0, 0.0, -0.0])  # saturated and zero gates

    assert_matches(kernel.silu_and_mul(x), SiluAndMul.reference(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
def test_rms_norm_with_and_without_the_residual_add(
    kernel: cpu_pointwise.CpuPointwise, dtype: torch.dtype, rows: int
) -> None:
    gen = torch.Generator().manual_seed(rows)
    norm = RMSNorm(576, eps=1e-5).to(dtype)
    norm.weight.data = (torch.rand(576, generator=gen) + 0.5).to(dtype)
    x = torch.randn(rows, 576, generator=gen).to(dtype)
    residual = torch.randn(rows, 576, generator=gen).to(dtype)

    assert_matches(kernel.rms_norm(x, norm.weight, norm.eps), norm.reference(x))
    ours = residual.clone()
    got = kernel.rms_norm(x, norm.weight, norm.eps, ours)
    expected_sum = residual + x  # rounded to the dtype, as the decoder's h + x is
    assert torch.equal(ours, expected_sum)
    assert_matches(got, norm.reference(expected_sum))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
def test_rotary_in_place_on_q_and_k_of_a_fused_qkv(
    kernel: cpu_pointwise.CpuPointwise, dtype: torch.dtype, rows: int
) -> None:
    heads, kv_heads, dim = 9, 3, 64
    rotary = RotaryEmbedding(dim, 4096, 10000.0, None).to(dtype)
    gen = torch.Generator().manual_seed(rows)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=gen).to(dtype)
    positions = torch.randint(0, 4096, (rows,), generator=gen)
    q = qkv[:, : heads * dim].reshape(rows, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].reshape(rows, kv_heads, dim)
    ref_q, ref_k = rotary(positions, q, k)

    ours = qkv.clone()
    assert rotary.rotate_in_place(positions, ours, heads + kv_heads)

    assert_matches(ours[:, : heads * dim].reshape(rows, heads, dim), ref_q)
    assert_matches(ours[:, heads * dim : (heads + kv_heads) * dim].reshape(rows, kv_heads, dim), ref_k)
    assert torch.equal(ours[:, (heads + kv_heads) * dim :], qkv[:, (heads + kv_heads) * dim :])  # v as it was


def test_rotary_refuses_a_position_past_its_table(kernel: cpu_pointwise.CpuPointwise) -> None:
    rotary = RotaryEmbedding(64, 128, 10000.0, None)
    qkv = torch.zeros(2, 3 * 64)

    with pytest.raises(IndexError):
        rotary.rotate_in_place(torch.tensor([0, 128]), qkv, 2)


def test_layers_keep_their_torch_ops_where_the_kernels_do_not_apply(
    kernel: cpu_pointwise.CpuPointwise,
) -> None:
    x = torch.randn(4, 2 * 64).half()
    assert not kernel.supports(x)
    assert not kernel.supports(torch.randn(8, 4).t())
    torch.testing.assert_close(SiluAndMul()(x), SiluAndMul.reference(x))
    norm = RMSNorm(64).half()
    h = torch.randn(3, 64).half()
    torch.testing.assert_close(norm(h), norm.reference(h))
    rotary = RotaryEmbedding(16, 32, 10000.0, None).half()
    assert not rotary.rotate_in_place(torch.arange(3), torch.zeros(3, 48).half(), 2)


def test_sizes_past_the_kernels_limits_keep_the_torch_ops(kernel: cpu_pointwise.CpuPointwise) -> None:
    wide = RMSNorm(cpu_pointwise.MAX_HIDDEN + 64)
    h = torch.randn(2, cpu_pointwise.MAX_HIDDEN + 64)
    torch.testing.assert_close(wide(h), wide.reference(h))
    residual = torch.randn_like(h)
    expected = wide.reference(residual + h)
    torch.testing.assert_close(wide.add_and_norm(h, residual)[0], expected)
    big_heads = RotaryEmbedding(2 * cpu_pointwise.MAX_HEAD_DIM, 8, 10000.0, None)
    assert not big_heads.rotate_in_place(torch.arange(2), torch.zeros(2, 4 * cpu_pointwise.MAX_HEAD_DIM), 1)


def test_switched_off_with_the_other_cpu_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SORTYARD_CPU_KERNELS", "0")
    cpu_pointwise.load.cache_clear()
    try:
        assert cpu_pointwise.load() is None
        norm = RMSNorm(8)
        h = torch.randn(2, 8)
        torch.testing.assert_close(norm(h), norm.reference(h))
    finally:
        cpu_pointwise.load.cache_clear()
