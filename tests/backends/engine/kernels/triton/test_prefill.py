"""The Triton prefill kernel against the torch path, under Triton's interpreter: fresh prompts, later
chunks of a chunked prefill and prefix hits (context read through its slots), causal and windowed masks,
GQA/MQA/MHA, block sizes, int8/fp8 caches."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0): no GPU-path tests")

import torch

from backends.engine.kernels.triton.prefill import PrefillBatch, prefill
from tests.backends.engine.kernels.triton.cases import (
    Step,
    assert_matches,
    build_step,
    needs_triton,
    reference,
)

pytestmark = needs_triton

HEADS = {"mqa": (4, 1, 32), "gqa": (6, 2, 64), "mha": (4, 4, 32)}
FRESH = [(0, 5), (0, 37), (0, 16), (0, 1)]
"""Prompts with no context: one token, a block, several blocks."""
CHUNKED = [(20, 13), (37, 30), (16, 16)]
"""Later chunks: context ending inside a block and on its edge."""
MIXED = [(0, 40), (25, 13), (3, 30), (0, 7)]


def run(step: Step, *, block_m: int = 16, block_n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's prefill rows over the caches the reference wrote, and the reference's."""
    expected, k_cache, v_cache = reference(step)
    out = torch.zeros_like(step.q)
    batches = PrefillBatch.split(step.meta.prefills, step.q.device)
    for batch in batches:
        prefill(
            step.q,
            step.k,
            step.v,
            k_cache,
            v_cache,
            batch,
            step.scale,
            out,
            step.meta.sliding_window,
            block_m=block_m,
            block_n=block_n,
        )
    d = step.meta.num_decode_tokens
    return out[d:], expected[d:]


@pytest.mark.parametrize("heads", HEADS)
def test_fresh_prompts(heads: str) -> None:
    out, expected = run(build_step(FRESH, *HEADS[heads]))
    assert_matches(out, expected)


@pytest.mark.parametrize("block_size", [8, 16])
@pytest.mark.parametrize("heads", HEADS)
def test_chunked_prefill_reads_its_context(heads: str, block_size: int) -> None:
    out, expected = run(build_step(CHUNKED, *HEADS[heads], block_size=block_size, seed=1))
    assert_matches(out, expected)


def test_prefix_hit() -> None:
    """The rest of a prompt after cached full blocks: two blocks, then one, of context."""
    out, expected = run(build_step([(32, 5), (16, 20)], *HEADS["gqa"], seed=2))
    assert_matches(out, expected)


@pytest.mark.parametrize("window", [8, 20])
def test_sliding_window(window: int) -> None:
    """Fresh prompts longer than the window, and chunks whose context starts at the window's first key."""
    out, expected = run(build_step(MIXED, *HEADS["gqa"], window=window, seed=3))
    assert_matches(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype: torch.dtype) -> None:
    out, expected = run(build_step(MIXED, *HEADS["mqa"], dtype=dtype, window=20, seed=4))
    assert out.dtype == dtype
    assert_matches(out, expected)


@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8"])
def test_quantized_cache(kv_cache_dtype: str) -> None:
    """Chunks with context read dequantized rows; fresh prompts their own k/v, as the torch path does."""
    step = build_step(MIXED, *HEADS["gqa"], kv_cache_dtype=kv_cache_dtype, seed=5)
    out, expected = run(step)
    assert_matches(out, expected)


def test_tile_sizes_agree() -> None:
    """The GPU's default tiles (64 x 64) and the small ones the other tests walk several of."""
    step = build_step(MIXED, *HEADS["gqa"], window=20, seed=6)
    small, expected = run(step)
    large, _ = run(step, block_m=64, block_n=64)
    assert_matches(large, expected)
    assert_matches(large, small)
