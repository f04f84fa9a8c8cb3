"""The Triton KV-cache write against ``kv_quant.write`` and ``index_copy_``, to the bit: plain rows, int8
and fp8 rows with their scales, zero rows, rounding ties, strided k/v."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0): no GPU-path tests")

import torch

from backends.engine.kernels.triton import tiles
from backends.engine.kernels.triton.kv_write import write_kv
from backends.engine.layers import kv_quant
from tests.backends.engine.kernels.triton.cases import DEVICE, needs_triton

pytestmark = needs_triton

NUM_KV_HEADS, HEAD_DIM, NUM_SLOTS = 2, 32, 64


def write_both(k: torch.Tensor, v: torch.Tensor, cache_dtype: torch.dtype) -> None:
    """Writes k, v at scattered slots with the kernel and with the reference; the caches must be equal."""
    slots = torch.randperm(NUM_SLOTS, generator=torch.Generator().manual_seed(0))[: k.shape[0]].to(DEVICE)
    k, v = k.to(DEVICE), v.to(DEVICE)
    width = HEAD_DIM + (kv_quant.SCALE_BYTES if cache_dtype in tiles.QMAX else 0)
    shape = (k.shape[1], NUM_SLOTS, width * cache_dtype.itemsize)
    caches = [torch.zeros(shape, dtype=torch.uint8, device=DEVICE).view(cache_dtype) for _ in range(4)]
    write_kv(k, v, caches[0], caches[1], slots)
    if cache_dtype in tiles.QMAX:
        kv_quant.write(caches[2], slots, k)
        kv_quant.write(caches[3], slots, v)
    else:
        caches[2].index_copy_(1, slots, k.transpose(0, 1).to(cache_dtype))
        caches[3].index_copy_(1, slots, v.transpose(0, 1).to(cache_dtype))
    assert torch.equal(caches[0].view(torch.uint8), caches[2].view(torch.uint8))
    assert torch.equal(caches[1].view(torch.uint8), caches[3].view(torch.uint8))


def test_quantized_dtypes_are_kv_quants() -> None:
    assert tiles.QMAX == kv_quant._QMAX
    assert set(tiles.QMAX) == set(kv_quant.STORAGE_DTYPES.values())


@pytest.mark.parametrize(
    ("dtype", "cache_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.int8),
        (torch.bfloat16, torch.int8),
        (torch.float32, torch.float8_e4m3fn),
        (torch.bfloat16, torch.float8_e4m3fn),
    ],
    ids=["fp32", "bf16", "int8", "int8-bf16", "fp8", "fp8-bf16"],
)
@pytest.mark.parametrize("num_kv_heads", [1, 3])
def test_matches_the_reference_writer(
    dtype: torch.dtype, cache_dtype: torch.dtype, num_kv_heads: int
) -> None:
    """k and v as the model hands them over (views into a fused q|k|v row), one all-zero row."""
    gen = torch.Generator().manual_seed(1)
    num_tokens, kv_size = 24, num_kv_heads * HEAD_DIM
    qkv = (torch.randn(num_tokens, 3 * kv_size, generator=gen) * 3).to(dtype)
    qkv[5, kv_size : kv_size + HEAD_DIM] = 0
    k = qkv[:, kv_size : 2 * kv_size].view(num_tokens, num_kv_heads, HEAD_DIM)
    v = qkv[:, 2 * kv_size :].view(num_tokens, num_kv_heads, HEAD_DIM)
    assert not k.is_contiguous()
    write_both(k, v, cache_dtype)


def _rows_with_unit_scale(values: torch.Tensor, qmax: float) -> torch.Tensor:
    """``values`` laid out as [tokens, kv heads, head_dim] rows whose first element is ``qmax``, so each
    row's scale is exactly 1 and its codes are the values themselves, rounded."""
    per_token = NUM_KV_HEADS * (HEAD_DIM - 1)
    values = torch.cat([values, values.new_zeros(-len(values) % per_token)])
    rows = values.view(-1, NUM_KV_HEADS, HEAD_DIM - 1)
    return torch.cat([rows.new_full((*rows.shape[:2], 1), qmax), rows], dim=2)


def test_int8_rounds_ties_to_even() -> None:
    ties = torch.arange(-127, 127, dtype=torch.float32) + 0.5
    rows = _rows_with_unit_scale(torch.cat([ties, ties + 0.25, ties - 0.25]), 127.0)
    write_both(rows, -rows, torch.int8)


def test_fp8_rounds_every_midpoint_to_even() -> None:
    """Every point halfway between neighbouring e4m3 values (normals, subnormals, carries into the next
    exponent), and points just either side, with both signs."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = codes[codes.isfinite() & (codes >= 0)].unique()  # sorted, 0 to 448
    midpoints = (grid[1:] + grid[:-1]) / 2
    values = torch.cat([midpoints, midpoints * (1 + 2**-20), midpoints * (1 - 2**-20)])
    rows = _rows_with_unit_scale(torch.cat([values, -values]), 448.0)
    write_both(rows, rows.flip(0), torch.float8_e4m3fn)
