"""The native CPU decode kernel on an int8 or fp8 KV cache against the torch path, which dequantizes what
it gathers: GQA, MQA, head sizes on the fixed and the general path, sliding windows, bf16 queries."""

from __future__ import annotations

import random

import pytest
import torch

from backends.engine.kernels import cpu_decode
from backends.engine.layers import kv_quant
from backends.engine.layers.attention import AttentionMetadata, _decode

BLOCK_SIZE = 16
QUANT = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}


@pytest.fixture(scope="module")
def kernel() -> cpu_decode.CpuDecodeKernel:
    loaded = cpu_decode.load()
    if loaded is None:
        pytest.skip("no C compiler here: the engine runs on its torch path")
    return loaded


def _case(
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    lens: list[int],
    dtype: torch.dtype,
    cache_dtype: torch.dtype,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Queries in ``dtype``; K/V quantized to ``cache_dtype`` rows; scattered blocks per sequence."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    num_blocks = 128
    shape = (num_kv_heads, num_blocks * BLOCK_SIZE, head_dim)
    k_cache = kv_quant.quantize(torch.randn(shape, generator=gen) * 3, cache_dtype)
    v_cache = kv_quant.quantize(torch.randn(shape, generator=gen), cache_dtype)
    max_blocks = -(-max(lens) // BLOCK_SIZE)
    tables = []
    for n in lens:
        own = rng.sample(range(num_blocks), -(-n // BLOCK_SIZE))
        tables.append(own + [own[0]] * (max_blocks - len(own)))
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(1, dtype=torch.long),
        block_size=BLOCK_SIZE,
        num_decode_tokens=len(lens),
        decode_blocks=torch.tensor(tables, dtype=torch.long),
        decode_lens=torch.tensor(lens, dtype=torch.int32),
    )
    q = torch.randn(len(lens), num_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, meta


@pytest.mark.parametrize("cache", ["int8", "fp8"])
@pytest.mark.parametrize("window", [None, 20])
@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim"),
    [(9, 3, 64), (4, 4, 32), (8, 1, 16), (6, 2, 128), (4, 1, 256)],
    ids=["gqa", "mha", "mqa-general", "wide", "gemma-general"],
)
def test_matches_torch_path_fp32(
    kernel: cpu_decode.CpuDecodeKernel,
    cache: str,
    window: int | None,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
) -> None:
    lens = [1, 15, 16, 17, 33, 200, 64]
    q, k_cache, v_cache, meta = _case(num_heads, num_kv_heads, head_dim, lens, torch.float32, QUANT[cache])
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    meta.sliding_window = window
    scale = head_dim**-0.5
    assert kernel.supports(q, k_cache)
    expected = _decode(q, k_cache, v_cache, meta.decode_blocks, meta.decode_mask(), scale)
    out = torch.empty_like(q)
    kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, scale, out, window)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cache", ["int8", "fp8"])
@pytest.mark.parametrize("window", [None, 24])
def test_matches_torch_path_bf16(kernel: cpu_decode.CpuDecodeKernel, cache: str, window: int | None) -> None:
    q, k_cache, v_cache, meta = _case(9, 3, 64, [5, 100, 300], torch.bfloat16, QUANT[cache])
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    meta.sliding_window = window
    # the kernel computes in fp32 from bf16 queries: the torch path in fp32 is its reference
    expected = _decode(q.float(), k_cache, v_cache, meta.decode_blocks, meta.decode_mask(), 0.125)
    out = torch.empty_like(q)
    kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, 0.125, out, window)
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)


def test_quantized_attention_is_close_to_the_float_cache(kernel: cpu_decode.CpuDecodeKernel) -> None:
    """Quantizing K/V moves the output by about the codes' precision, no more."""
    gen = torch.Generator().manual_seed(1)
    shape = (3, 64 * BLOCK_SIZE, 64)
    k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    q = torch.randn(2, 9, 64, generator=gen)
    blocks = torch.arange(64, dtype=torch.long).view(2, 32)
    lens = torch.tensor([500, 300], dtype=torch.int32)
    ref = torch.empty_like(q)
    kernel(q, k, v, blocks, lens, BLOCK_SIZE, 0.125, ref)
    for cache, tol in (("int8", 0.005), ("fp8", 0.04)):  # V ~ N(0, 1): errors in its units
        out = torch.empty_like(q)
        kq, vq = kv_quant.quantize(k, QUANT[cache]), kv_quant.quantize(v, QUANT[cache])
        kernel(q, kq, vq, blocks, lens, BLOCK_SIZE, 0.125, out)
        assert (out - ref).abs().max() < tol, cache


def test_every_fp8_code_decodes_exactly(kernel: cpu_decode.CpuDecodeKernel) -> None:
    """One key: the output is its V row, so every e4m3 code (all but the two NaNs) comes back as torch
    reads it, subnormals and signs included."""
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    codes = torch.cat([codes, torch.zeros(256 - len(codes), dtype=torch.uint8)]).view(4, 64)
    scale = torch.full((4, 1), 0.5).view(torch.uint8)
    rows = torch.cat([codes, scale], dim=-1).view(torch.float8_e4m3fn)  # 4 slots of one kv head
    k_cache = v_cache = rows.unsqueeze(0)
    q = torch.randn(4, 1, 64)
    blocks = torch.zeros(4, 1, dtype=torch.long)
    out = torch.empty_like(q)
    for slot in range(4):  # a block of 4 slots: the sequence of length slot + 1 ends on that slot
        lens = torch.tensor([slot + 1] * 4, dtype=torch.int32)
        kernel(q, k_cache, v_cache, blocks, lens, 4, 0.125, out, 1)
        expected = codes[slot].view(torch.float8_e4m3fn).float() * 0.5
        torch.testing.assert_close(out[0, 0], expected, rtol=0, atol=0)


def test_rejects_a_cache_without_room_for_scales(kernel: cpu_decode.CpuDecodeKernel) -> None:
    q = torch.randn(1, 2, 64)
    k_cache = torch.zeros(2, 32, 64, dtype=torch.int8)  # no scale bytes after the codes
    blocks, lens = torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.int32)
    with pytest.raises(ValueError):
        kernel(q, k_cache, k_cache, blocks, lens, 16, 0.125, torch.empty_like(q))
