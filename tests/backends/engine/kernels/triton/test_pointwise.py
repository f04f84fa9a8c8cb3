"""The Triton pointwise kernels against the layers' torch references: SiLU-and-mul, RMSNorm with and
without the residual add (the sum written back rounded as ``h + x``), rotary in place on q and k of a
fused q|k|v row (v untouched), in fp32, fp16 and bf16."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0): no GPU-path tests")

import torch

from backends.engine.kernels.triton.pointwise import TritonPointwise
from backends.engine.layers.activation import SiluAndMul
from backends.engine.layers.norm import RMSNorm
from backends.engine.layers.rotary import RotaryEmbedding
from tests.backends.engine.kernels.triton.cases import DEVICE, TOLERANCE, needs_triton

pytestmark = needs_triton

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
KERNEL = TritonPointwise()


def assert_close(got: torch.Tensor, expected: torch.Tensor) -> None:
    tolerance = TOLERANCE[expected.dtype]
    torch.testing.assert_close(got.float().cpu(), expected.float().cpu(), atol=tolerance, rtol=tolerance)


def random(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype: torch.dtype) -> None:
    x = random(3, 2 * 96, dtype=dtype)
    assert_close(KERNEL.silu_and_mul(x), SiluAndMul.reference(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_and_the_residual_add(dtype: torch.dtype) -> None:
    norm = RMSNorm(80, eps=1e-5).to(dtype).to(DEVICE)
    norm.weight.data = random(80, dtype=dtype, seed=1)
    x, residual = random(3, 80, dtype=dtype, seed=2), random(3, 80, dtype=dtype, seed=3)
    assert_close(KERNEL.rms_norm(x, norm.weight, norm.eps), norm.reference(x))

    ours = residual.clone()
    got = KERNEL.rms_norm(x, norm.weight, norm.eps, ours)
    expected_sum = residual + x
    assert torch.equal(ours, expected_sum)
    assert_close(got, norm.reference(expected_sum))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_in_place_on_q_and_k_of_a_fused_qkv(dtype: torch.dtype) -> None:
    heads, kv_heads, dim, rows = 3, 1, 32, 4
    rotary = RotaryEmbedding(dim, 256, 10000.0, None).to(dtype)
    qkv = random(rows, (heads + 2 * kv_heads) * dim, dtype=dtype, seed=4)
    positions = torch.tensor([0, 7, 100, 255], device=DEVICE)
    q = qkv[:, : heads * dim].reshape(rows, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].reshape(rows, kv_heads, dim)
    ref_q, ref_k = rotary.to(DEVICE)(positions, q, k)

    ours = qkv.clone()
    KERNEL.rotary(ours, positions, rotary.cos, rotary.sin, heads + kv_heads, dim)

    assert_close(ours[:, : heads * dim].reshape(rows, heads, dim), ref_q)
    assert_close(ours[:, heads * dim : (heads + kv_heads) * dim].reshape(rows, kv_heads, dim), ref_k)
    assert torch.equal(ours[:, (heads + kv_heads) * dim :], qkv[:, (heads + kv_heads) * dim :])


def test_supports_one_device_one_float_dtype_contiguous() -> None:
    x = random(2, 8, dtype=torch.float32)
    assert KERNEL.supports(x, x.clone())
    assert not KERNEL.supports(x, x.to(torch.bfloat16))
    assert not KERNEL.supports(x.t())
    assert not KERNEL.supports(x.to(torch.int32))
