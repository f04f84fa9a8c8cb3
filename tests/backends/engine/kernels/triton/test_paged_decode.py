"""The Triton paged decode kernel against the torch path, under Triton's interpreter: GQA, MQA and MHA,
block sizes, ragged lengths, sliding windows, split-K over several partitions, int8/fp8 caches."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0): no GPU-path tests")

import torch

from backends.engine.kernels.triton.paged_decode import paged_decode
from tests.backends.engine.kernels.triton.cases import (
    DEVICE,
    Step,
    assert_matches,
    build_step,
    needs_triton,
    reference,
)

pytestmark = needs_triton

CONTEXTS = [1, 14, 15, 16, 39, 96]
"""Lengths 2 to 97 with the new token: one block, block edges, several blocks."""
HEADS = {"mqa": (4, 1, 32), "gqa": (6, 2, 64), "mha": (4, 4, 32)}
SPLIT = {"one-pass": 512, "split-k": 32}
"""Partition sizes: one partition for every length here, or up to four of 32 tokens."""


def decode_step(heads: str, **kwargs: Any) -> Step:
    num_heads, num_kv_heads, head_dim = HEADS[heads]
    return build_step([(c, 1) for c in CONTEXTS], num_heads, num_kv_heads, head_dim, **kwargs)


def run(step: Step, partition_size: int, q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's output over the caches the reference wrote, and the reference's."""
    expected, k_cache, v_cache = reference(step)
    meta = step.meta
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    out = torch.empty_like(step.q)
    paged_decode(
        step.q if q is None else q,
        k_cache,
        v_cache,
        meta.decode_blocks,
        meta.decode_lens,
        meta.block_size,
        step.scale,
        out,
        meta.sliding_window,
        partition_size=partition_size,
        block_n=16,
    )
    return out, expected


@pytest.mark.parametrize("split", SPLIT)
@pytest.mark.parametrize("block_size", [8, 16])
@pytest.mark.parametrize("heads", HEADS)
def test_matches_torch_fp32(heads: str, block_size: int, split: str) -> None:
    out, expected = run(decode_step(heads, block_size=block_size), SPLIT[split])
    assert_matches(out, expected)


@pytest.mark.parametrize("split", SPLIT)
@pytest.mark.parametrize("window", [5, 16, 20, 33])
def test_sliding_window(window: int, split: str) -> None:
    """Cuts inside a block and on its edge; with split-K the partitions before the window stay empty."""
    out, expected = run(decode_step("gqa", window=window, seed=1), SPLIT[split])
    assert_matches(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("split", SPLIT)
def test_half_precision(dtype: torch.dtype, split: str) -> None:
    out, expected = run(decode_step("gqa", dtype=dtype, seed=2), SPLIT[split])
    assert out.dtype == dtype
    assert_matches(out, expected)


@pytest.mark.parametrize("window", [None, 20])
@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8"])
def test_quantized_cache(kv_cache_dtype: str, window: int | None) -> None:
    """Codes read in place and scaled by their row's fp32 scale, as the torch path dequantizes them."""
    step = decode_step("mqa", kv_cache_dtype=kv_cache_dtype, window=window, seed=3)
    out, expected = run(step, SPLIT["split-k"])
    assert_matches(out, expected)


def test_split_k_over_a_long_context() -> None:
    """Ten partitions for the longest sequence, mostly empty ones for the shortest: the reduction weighs
    each by its max and sum, and agrees with the one-pass kernel."""
    step = build_step([(299, 1), (3, 1), (64, 1)], 6, 2, 64, seed=4)
    split, expected = run(step, 32)
    one_pass, _ = run(step, 512)
    assert_matches(split, expected)
    assert_matches(split, one_pass)


def test_queries_may_be_rows_of_a_wider_tensor() -> None:
    """q as the model hands it over: the first heads of each row of a fused q|k|v output."""
    step = decode_step("gqa", seed=5)
    num_tokens, num_heads, head_dim = step.q.shape
    qkv = torch.randn(num_tokens, (num_heads + 4) * head_dim, device=DEVICE)
    qkv[:, : num_heads * head_dim] = step.q.reshape(num_tokens, -1)
    strided = qkv[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
    assert not strided.is_contiguous()
    out, expected = run(step, SPLIT["split-k"], q=strided)
    assert_matches(out, expected)
