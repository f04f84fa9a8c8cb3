"""The tile loader both attention kernels read the cache with, under Triton's interpreter: plain rows,
int8/fp8 rows dequantized with their scale, masked rows zeroed; and the ``tl.dot`` settings per dtype."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0): no GPU-path tests")

import torch
import triton
import triton.language as tl

from backends.engine.kernels.triton import tiles
from backends.engine.layers import kv_quant
from tests.backends.engine.kernels.triton.cases import DEVICE, needs_triton

pytestmark = needs_triton

HEAD_DIM, NUM_SLOTS, NUM_ROWS = 24, 40, 16  # a head_dim short of its tile: the tail is masked too


@triton.jit
def _load_kernel(
    cache_ptr: tl.tensor,
    scale_ptr: tl.tensor,
    slots_ptr: tl.tensor,
    out_ptr: tl.tensor,
    num_rows: tl.tensor,
    stride_ch: tl.tensor,
    stride_cs: tl.tensor,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_QUANTIZED: tl.constexpr,
) -> None:
    head = tl.program_id(0)
    n = tl.arange(0, BLOCK_N)
    is_row = n < num_rows
    slots = tl.load(slots_ptr + n, mask=is_row, other=0)
    x = tiles.load_kv_tile(
        cache_ptr,
        scale_ptr,
        head * stride_ch,
        slots,
        stride_cs,
        is_row,
        tl.float32,
        HEAD_DIM,
        BLOCK_D,
        IS_QUANTIZED,
    )
    d = tl.arange(0, BLOCK_D)
    tl.store(out_ptr + (head * BLOCK_N + n[:, None]) * BLOCK_D + d[None, :], x)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8", "fp8"])
def test_load_kv_tile_reads_rows_as_the_torch_path_gathers_them(kv_cache_dtype: str) -> None:
    """Rows at scattered slots, as ``kv_quant.gather`` (or ``index_select``) reads them; rows past the
    count and dims past head_dim come back 0 whatever the cache holds there."""
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(2, NUM_SLOTS, HEAD_DIM, generator=gen) * 3
    if kv_cache_dtype == "auto":
        cache = values
        expected = values
    else:
        cache = kv_quant.quantize(values, kv_quant.STORAGE_DTYPES[kv_cache_dtype])
        expected = kv_quant.dequantize(cache, torch.float32)
    assert tiles.is_quantized(cache) == (kv_cache_dtype != "auto")
    slots = torch.randperm(NUM_SLOTS, generator=gen)[: NUM_ROWS - 3]  # three masked rows
    block_d = tiles.block_dim(HEAD_DIM)
    out = torch.full((2, NUM_ROWS, block_d), float("nan"), device=DEVICE)
    cache, expected, slots = cache.to(DEVICE), expected.to(DEVICE), slots.to(DEVICE)
    _load_kernel[(2,)](
        cache,
        tiles.scale_view(cache),
        slots,
        out,
        len(slots),
        cache.stride(0),
        cache.stride(1),
        HEAD_DIM=HEAD_DIM,
        BLOCK_D=block_d,
        BLOCK_N=NUM_ROWS,
        IS_QUANTIZED=tiles.is_quantized(cache),
    )
    assert torch.equal(out[:, : len(slots), :HEAD_DIM], expected[:, slots])
    assert not out[:, len(slots) :].any() and not out[..., HEAD_DIM:].any()


def test_dot_config() -> None:
    """fp32 multiplies in IEEE fp32 (never TF32); bf16 is widened only under the interpreter."""
    assert tiles.DotConfig.of(torch.float32) == tiles.DotConfig(tl.float32, "ieee")
    assert tiles.DotConfig.of(torch.float16) == tiles.DotConfig(tl.float16, "tf32")
    interpreted = tiles.DotConfig(tl.float32, "ieee")
    compiled = tiles.DotConfig(tl.bfloat16, "tf32")
    assert tiles.DotConfig.of(torch.bfloat16) == (interpreted if DEVICE.type == "cpu" else compiled)


def test_block_dim_is_a_dot_friendly_power_of_two() -> None:
    assert [tiles.block_dim(d) for d in [8, 16, 24, 64, 80, 128, 256]] == [16, 16, 32, 64, 128, 128, 256]
