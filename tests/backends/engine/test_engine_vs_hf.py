"""Greedy output of the paged engine is token-identical to Hugging Face transformers (fp32)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from backends.engine import block_hash
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.tiny import VARIANTS, hf_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)


def random_prompts(num: int, min_len: int, max_len: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randint(min_len, max_len))] for _ in range(num)]


def assert_matches_hf(hf: Any, prompts: list[list[int]], outputs: list[Any], max_tokens: int = 8) -> None:
    for prompt, out in zip(prompts, outputs, strict=True):
        ref_tokens, ref_logprobs = hf_greedy(hf, prompt, max_tokens)
        completion = out.outputs[0]
        assert completion.token_ids == ref_tokens
        got = [chosen.logprob for chosen, _ in completion.logprobs]
        assert got == pytest.approx(ref_logprobs, abs=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_single_request_matches_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant)
    prompts = random_prompts(1, 20, 40, seed=1)
    assert_matches_hf(hf_models[variant], prompts, engine.generate(prompts, GREEDY))


@pytest.mark.parametrize("variant", ["gqa", "mqa"])
def test_sixteen_concurrent_requests_match_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant)
    prompts = random_prompts(16, 1, 70, seed=2)
    assert_matches_hf(hf_models[variant], prompts, engine.generate(prompts, GREEDY))


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_prefill_matches_hf(
    chunk: int, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine("gqa", max_num_batched_tokens=chunk)
    prompts = random_prompts(4, 30, 90, seed=3)
    assert_matches_hf(hf_models["gqa"], prompts, engine.generate(prompts, GREEDY))


def test_preemption_matches_hf(make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    # 12 blocks of 16 tokens: four ~40-token prompts growing by 24 cannot all stay resident
    engine = make_engine("gqa", kv_cache_bytes=12 * engine_block_bytes())
    prompts = random_prompts(4, 35, 45, seed=4)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=0)
    outputs = engine.generate(prompts, params)
    assert engine.stats().num_preemptions > 0
    assert_matches_hf(hf_models["gqa"], prompts, outputs, max_tokens=24)


def test_prefix_cache_hits_match_hf(make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    engine = make_engine("gqa")
    shared = random_prompts(1, 50, 50, seed=5)[0]
    prompts = [shared + tail for tail in random_prompts(3, 1, 20, seed=6)] + [shared]
    first = engine.generate(prompts[:1], GREEDY)
    rest = engine.generate(prompts[1:], GREEDY)
    assert all(out.num_cached_tokens == 48 for out in rest)
    stats = engine.stats()
    assert stats.prefix_cache_hits >= 3 * 48
    assert_matches_hf(hf_models["gqa"], prompts, first + rest)


def test_fully_cached_prompt_still_samples(make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    engine = make_engine("gqa")
    prompt = random_prompts(1, 64, 64, seed=7)  # exactly four blocks
    first = engine.generate(prompt, GREEDY)
    again = engine.generate(prompt, GREEDY)
    assert again[0].num_cached_tokens == 48  # the last block is recomputed to get logits
    assert again[0].outputs[0].token_ids == first[0].outputs[0].token_ids
    assert_matches_hf(hf_models["gqa"], prompt, again)


def test_cache_salt_isolates_tenants(make_engine: EngineFactory) -> None:
    engine = make_engine("gqa")
    prompt = random_prompts(1, 40, 40, seed=8)[0]
    engine.add_request("a", prompt, GREEDY, cache_salt="tenant-a")
    while engine.has_unfinished_requests():
        engine.step()
    engine.add_request("b", prompt, GREEDY, cache_salt="tenant-b")
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    assert outs[-1].num_cached_tokens == 0
    engine.add_request("c", prompt, GREEDY, cache_salt="tenant-a")
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    assert outs[-1].num_cached_tokens == 32


def test_colliding_block_digests_never_share_kv(
    make_engine: EngineFactory, hf_models: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(block_hash, "block_digest", lambda parent, data: bytes(block_hash.DIGEST_SIZE))
    engine = make_engine("gqa")
    a, b = random_prompts(2, 40, 40, seed=9)
    first = engine.generate([a], GREEDY)
    second = engine.generate([b], GREEDY)  # every block digest collides with a's
    again = engine.generate([a], GREEDY)
    assert second[0].num_cached_tokens == 0 and again[0].num_cached_tokens == 32
    assert_matches_hf(hf_models["gqa"], [a, b, a], first + second + again)


def engine_block_bytes() -> int:
    # tiny "gqa": 2 layers x 2 kv heads x head_dim 16, fp32, K and V, 16 tokens a block
    return 2 * 2 * 2 * 16 * 4 * 16
