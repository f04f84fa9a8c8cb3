"""Mistral-style sliding-window attention (every layer slides): greedy tokens identical to transformers in
fp32 for prompts several windows long, through batching, chunked prefill, preemption and prefix hits, on
the CPU decode kernel and on the torch path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backends.engine.kernels import cpu_decode
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_engine_vs_hf import assert_matches_hf, random_prompts

WINDOWED = ["mistral_window8", "mistral_window20"]
LONG = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=1)


@pytest.fixture
def torch_decode_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Engines built inside the test decode with the torch gather path, not the native kernel."""
    monkeypatch.setenv("SORTYARD_CPU_KERNELS", "0")
    cpu_decode.load.cache_clear()
    yield
    cpu_decode.load.cache_clear()


@pytest.mark.parametrize("variant", WINDOWED)
@torch.inference_mode()
def test_transformers_applies_the_window(variant: str, hf_models: dict[str, Any]) -> None:
    """The oracle itself slides: logits equal full attention up to the window, then differ."""
    hf = hf_models[variant]
    window = hf.config.sliding_window
    ids = torch.tensor([random_prompts(1, 3 * window, 3 * window, seed=10)[0]])
    windowed = hf(ids).logits[0]
    hf.config.sliding_window = None
    try:
        full = hf(ids).logits[0]
    finally:
        hf.config.sliding_window = window
    torch.testing.assert_close(windowed[:window], full[:window])
    assert (windowed[window:] - full[window:]).abs().amax() > 1e-2


@pytest.mark.parametrize("variant", WINDOWED)
def test_batched_prompts_match_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant)
    prompts = random_prompts(6, 1, 90, seed=11)  # one shorter than a window, most several windows long
    assert_matches_hf(hf_models[variant], prompts, engine.generate(prompts, LONG), max_tokens=24)


def test_torch_decode_path_matches_hf(
    torch_decode_path: None, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine("mistral_window20")
    assert engine.runner.model.layers[0].self_attn.backend.decode_kernel is None  # type: ignore[union-attr]
    prompts = random_prompts(4, 30, 70, seed=12)
    assert_matches_hf(hf_models["mistral_window20"], prompts, engine.generate(prompts, LONG), max_tokens=24)


@pytest.mark.parametrize("path", ["torch", "native"])
def test_never_written_cache_memory_never_reaches_an_answer(
    path: str, make_engine: EngineFactory, hf_models: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    """The cache is allocated empty: whatever a block's unwritten slots hold (here NaN, as a reused
    page may), each decode path masks it out, values included (a zero probability times NaN is NaN)."""
    if path == "torch":
        request.getfixturevalue("torch_decode_path")
    engine = make_engine("mistral_window20")
    runner = engine.runner
    for cache in (runner.k_cache, runner.v_cache):
        cache.fill_(float("nan"))
    prompts = random_prompts(4, 30, 70, seed=12)
    assert_matches_hf(hf_models["mistral_window20"], prompts, engine.generate(prompts, LONG), max_tokens=24)


@pytest.mark.parametrize(("variant", "chunk"), [("mistral_window8", 5), ("mistral_window20", 13)])
def test_chunked_prefill_matches_hf(
    variant: str, chunk: int, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant, max_num_batched_tokens=chunk)
    prompts = random_prompts(3, 40, 80, seed=13)
    assert_matches_hf(hf_models[variant], prompts, engine.generate(prompts, LONG), max_tokens=24)


@pytest.mark.parametrize("variant", WINDOWED)
def test_preemption_matches_hf(variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    kv_heads = hf_models[variant].config.num_key_value_heads
    block_bytes = 2 * 2 * kv_heads * 16 * 4 * 16  # layers x K,V x kv heads x head_dim x fp32 x tokens
    # every block kept, so four sequences outgrow 12 blocks (freeing what the window passed, they would
    # fit: preemption with freeing is tested in test_sliding_window_memory.py)
    engine = make_engine(variant, kv_cache_bytes=12 * block_bytes, free_window_blocks=False)
    prompts = random_prompts(4, 35, 45, seed=14)
    outputs = engine.generate(prompts, LONG)
    assert engine.stats().num_preemptions > 0
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=24)


@pytest.mark.parametrize("variant", WINDOWED)
def test_prefix_cache_hits_match_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant)
    shared = random_prompts(1, 50, 50, seed=15)[0]
    prompts = [shared + tail for tail in random_prompts(3, 1, 20, seed=16)] + [shared]
    first = engine.generate(prompts[:1], LONG)
    rest = engine.generate(prompts[1:], LONG)
    assert all(out.num_cached_tokens == 48 for out in rest)  # the query chunk starts after cached blocks
    assert_matches_hf(hf_models[variant], prompts, first + rest, max_tokens=24)
