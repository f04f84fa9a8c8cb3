"""When every layer slides, the pool frees the blocks the window has passed: a sequence holds about
window / block_size + 1 blocks however long it grows, and greedy tokens stay identical to transformers
through chunked prefill, preemption, prefix hits on freed blocks and n > 1 forks. The pool is checked
after every step, and no freed table entry ever reaches the attention metadata."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backends.engine.block_manager import BlockManager
from backends.engine.kv_sizing import kv_bytes_per_token
from backends.engine.llm_engine import LLMEngine
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_engine_vs_hf import assert_matches_hf, random_prompts
from tests.backends.engine.test_sliding_window import WINDOWED

BLOCK_SIZE = 16


def greedy(max_tokens: int, n: int = 1) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=1, n=n)


def live_bound(window: int) -> int:
    """Blocks a sequence holds between steps: those from its next query's first key to its last token."""
    return -(-(window - 1) // BLOCK_SIZE) + 1


def pool(engine: LLMEngine) -> BlockManager:
    """The engine's one block pool: every layer of these models slides, so there are no ``KVGroups``."""
    assert isinstance(engine.block_manager, BlockManager)
    return engine.block_manager


def block_bytes(engine: LLMEngine) -> int:
    return kv_bytes_per_token(engine.model_config, torch.float32) * BLOCK_SIZE


def guard_metadata(engine: LLMEngine) -> None:
    """Fail the step if a freed table entry (a negative id) reaches a slot, a decode table or a context."""
    prepare = engine.runner._prepare

    def checked(batch: Any) -> Any:
        ids, positions, meta, last_rows = prepare(batch)
        assert int(meta.slot_mapping.min()) >= 0
        if meta.decode_blocks is not None:
            assert int(meta.decode_blocks.min()) >= 0
        for chunk in meta.prefills:
            assert chunk.context_slots is None or int(chunk.context_slots.min()) >= 0
        return ids, positions, meta, last_rows

    engine.runner._prepare = checked  # type: ignore[method-assign]


def run_checked(
    engine: LLMEngine, prompts: list[list[int]], params: SamplingParams, *, bound: int | None = None
) -> list[RequestOutput]:
    """generate(), with the pool checked after every step and, given ``bound``, every running
    sequence's live blocks at most ``bound``."""
    guard_metadata(engine)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, params)
    done: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
        engine.check_invariants()
        if bound is not None:
            for seq in engine.scheduler.running:
                assert len(seq.block_table) - seq.num_freed_blocks <= bound
    return [done[f"r{i}"] for i in range(len(prompts))]


@pytest.mark.parametrize("variant", WINDOWED)
def test_a_long_generation_holds_only_its_window(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    prompts = random_prompts(1, 40, 40, seed=20)
    engine = make_engine(variant)
    assert pool(engine).sliding_window == window
    outputs = run_checked(engine, prompts, greedy(260), bound=live_bound(window))
    # 300 tokens would fill 19 blocks; a step holds the window's blocks plus the one it writes into
    assert pool(engine).max_num_used_blocks <= live_bound(window) + 1
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=260)
    keeper = make_engine(variant, free_window_blocks=False)
    assert pool(keeper).sliding_window is None
    kept = run_checked(keeper, prompts, greedy(260))
    assert pool(keeper).max_num_used_blocks == 19
    assert kept[0].outputs[0].token_ids == outputs[0].outputs[0].token_ids


@pytest.mark.parametrize(("variant", "chunk"), [("mistral_window8", 5), ("mistral_window20", 13)])
def test_chunked_prefill_with_freeing_matches_hf(
    variant: str, chunk: int, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    engine = make_engine(variant, max_num_batched_tokens=chunk)
    prompts = random_prompts(3, 60, 150, seed=21)  # each chunk reads context from freed tables
    outputs = run_checked(engine, prompts, greedy(40), bound=live_bound(window) + 1)
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=40)


@pytest.mark.parametrize("variant", WINDOWED)
def test_a_pool_too_small_to_keep_everything_runs_with_freeing(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    prompts = random_prompts(4, 35, 45, seed=22)  # each grows to about 160 tokens: 10 blocks
    probe = make_engine(variant)
    budget = 5 * block_bytes(probe)  # 5 blocks (80 slots): four sequences, each twice the whole pool
    engine = make_engine(variant, kv_cache_bytes=budget)
    assert engine.block_manager.num_blocks == 5
    outputs = run_checked(engine, prompts, greedy(120), bound=live_bound(window))
    assert all(len(o.outputs[0].token_ids) == 120 for o in outputs)
    stats = engine.stats()
    assert stats.num_preemptions > 0  # decodes that need a new block at once do not all fit
    assert stats.prefix_cache_hits > 0  # a preempted sequence came back from its cached window
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=120)
    keeper = make_engine(variant, kv_cache_bytes=budget, free_window_blocks=False)
    kept = run_checked(keeper, prompts, greedy(120))
    assert all(len(o.outputs[0].token_ids) < 120 for o in kept)  # each outgrew the pool: "length"


@pytest.mark.parametrize("variant", WINDOWED)
def test_prefix_hits_on_blocks_the_window_freed(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant)
    shared = random_prompts(1, 100, 100, seed=23)[0]
    prompts = [shared + tail for tail in random_prompts(3, 1, 20, seed=24)] + [shared]
    first = run_checked(engine, prompts[:1], greedy(30))
    bm = pool(engine)
    assert bm.num_used_blocks == 0 and len(bm.evictable) >= 6  # freed early or at the end, still hashed
    rest = run_checked(engine, prompts[1:], greedy(30))
    assert all(out.num_cached_tokens == 96 for out in rest)
    assert_matches_hf(hf_models[variant], prompts, first + rest, max_tokens=30)


@pytest.mark.parametrize("variant", WINDOWED)
def test_n_completions_fork_after_freeing(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    prompt = random_prompts(1, 70, 70, seed=25)[0]  # prefilled in chunks of 7: the parent frees as it goes
    engine = make_engine(variant, max_num_batched_tokens=7)
    guard_metadata(engine)
    engine.add_request("greedy", prompt, greedy(40, n=3))
    shared = False
    done: list[RequestOutput] = []
    while engine.has_unfinished_requests():
        done += [o for o in engine.step() if o.finished]
        engine.check_invariants()
        seqs = engine.requests["greedy"].seqs if "greedy" in engine.requests else []
        if len(seqs) == 3 and all(s.num_computed_tokens > 0 for s in seqs[1:]):
            shared = shared or max(pool(engine).ref_counts) == 3
            for s in seqs:
                assert len(s.block_table) - s.num_freed_blocks <= live_bound(window) + 1
    assert shared  # the children started from the parent's window, not from scratch
    completions = done[0].outputs
    assert_matches_hf(hf_models[variant], [prompt], [done[0]], max_tokens=40)
    assert all(c.token_ids == completions[0].token_ids for c in completions)


@pytest.mark.parametrize("variant", WINDOWED)
def test_sampled_completions_equal_with_and_without_freeing(variant: str, make_engine: EngineFactory) -> None:
    prompts = random_prompts(2, 50, 80, seed=26)
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=60, ignore_eos=True)
    freed = run_checked(make_engine(variant, max_num_batched_tokens=11), prompts, params)
    kept = run_checked(
        make_engine(variant, max_num_batched_tokens=11, free_window_blocks=False), prompts, params
    )
    for a, b in zip(freed, kept, strict=True):
        assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    assert len({tuple(c.token_ids) for c in freed[0].outputs}) > 1


def test_engines_without_a_window_free_nothing(make_engine: EngineFactory) -> None:
    engine = make_engine("gqa")
    assert pool(engine).sliding_window is None
    prompts = random_prompts(2, 30, 40, seed=27)
    run_checked(engine, prompts, greedy(40))
    # both ran to the end together, holding every block: the last sampled token is never computed
    assert pool(engine).max_num_used_blocks == sum(-(-(len(p) + 39) // BLOCK_SIZE) for p in prompts)
