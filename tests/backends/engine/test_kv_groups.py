"""Two KV groups for models that mix full and sliding layers (tiny random Gemma 3): the sliding layers'
pool frees what the window has passed, so a sequence holds about window / block_size + 1 of its blocks
however long it grows, while the full layers' pool keeps every block. Greedy tokens stay identical to
transformers (and to the one-pool layout) through chunked prefill, preemption, prefix hits and n > 1
forks, with both pools checked after every step and no freed table entry reaching either view."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backends.engine.block_manager import BlockManager
from backends.engine.kv_groups import KVGroups
from backends.engine.kv_sizing import kv_bytes_per_token
from backends.engine.llm_engine import LLMEngine
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_engine_vs_hf import assert_matches_hf, random_prompts
from tests.backends.engine.test_sliding_window_memory import BLOCK_SIZE, greedy, live_bound
from tests.backends.engine.tiny import GEMMA3_VARIANTS


def groups_of(engine: LLMEngine) -> KVGroups:
    bm = engine.block_manager
    assert isinstance(bm, KVGroups)
    return bm


def guard_views(engine: LLMEngine) -> None:
    """Fail the step if a freed table entry (a negative id) reaches a slot, a decode table or a context
    of either view (the full layers' or the sliding layers')."""
    prepare = engine.runner._prepare

    def checked(batch: Any) -> Any:
        ids, positions, meta, last_rows = prepare(batch)
        for view in (meta, meta.sliding_view):
            assert view is not None
            assert int(view.slot_mapping.min()) >= 0
            if view.decode_blocks is not None:
                assert int(view.decode_blocks.min()) >= 0
            for chunk in view.prefills:
                assert chunk.context_slots is None or int(chunk.context_slots.min()) >= 0
        return ids, positions, meta, last_rows

    engine.runner._prepare = checked  # type: ignore[method-assign]


def sliding_live(seq: Any) -> int:
    t = seq.sliding_blocks
    return len(t.block_table) - t.num_freed_blocks


def run_checked(
    engine: LLMEngine, prompts: list[list[int]], params: SamplingParams, *, bound: int | None = None
) -> list[RequestOutput]:
    """generate(), both pools checked after every step and, given ``bound``, every running sequence's
    live blocks in the sliding group at most ``bound``."""
    if isinstance(engine.block_manager, KVGroups):
        guard_views(engine)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, params)
    done: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        done.update((o.request_id, o) for o in engine.step() if o.finished)
        engine.check_invariants()
        if bound is not None:
            assert all(sliding_live(seq) <= bound for seq in engine.scheduler.running)
    return [done[f"r{i}"] for i in range(len(prompts))]


def one_pool_block_bytes(engine: LLMEngine) -> int:
    return kv_bytes_per_token(engine.model_config, torch.float32) * BLOCK_SIZE


def test_only_mixed_models_get_two_groups(make_engine: EngineFactory) -> None:
    engine = make_engine("gemma3_window8")  # layers: sliding, sliding, full, sliding, sliding, full
    groups = groups_of(engine)
    assert groups.full.sliding_window is None and groups.sliding.sliding_window == 8
    assert engine.runner.has_two_groups
    assert engine.runner.k_cache.shape[0] == 2 and engine.runner.sliding_k_cache.shape[0] == 4
    assert engine.runner.k_cache.shape[2] == groups.full.num_blocks * BLOCK_SIZE
    assert engine.runner.sliding_k_cache.shape[2] == groups.sliding.num_blocks * BLOCK_SIZE
    one_pool = make_engine("gemma3_window8", free_window_blocks=False)
    assert isinstance(one_pool.block_manager, BlockManager) and one_pool.block_manager.sliding_window is None
    assert not one_pool.runner.has_two_groups and one_pool.runner.is_mixed
    for variant, window in (("gqa", None), ("mistral_window8", 8)):
        single = make_engine(variant)
        assert isinstance(single.block_manager, BlockManager)
        assert single.block_manager.sliding_window == window and not single.runner.has_two_groups


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_a_long_generation_holds_only_its_window_in_the_sliding_group(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    prompts = random_prompts(1, 40, 40, seed=30)
    engine = make_engine(variant)
    outputs = run_checked(engine, prompts, greedy(260), bound=live_bound(window))
    groups = groups_of(engine)
    # 300 tokens fill 19 blocks: the full group keeps them all, the sliding group its window's
    assert groups.full.max_num_used_blocks == 19
    assert groups.sliding.max_num_used_blocks <= live_bound(window) + 1
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=260)
    one_pool = run_checked(make_engine(variant, free_window_blocks=False), prompts, greedy(260))
    assert one_pool[0].outputs[0].token_ids == outputs[0].outputs[0].token_ids


@pytest.mark.parametrize(("variant", "chunk"), [("gemma3_window8", 5), ("gemma3_window20", 13)])
def test_chunked_prefill_with_two_groups_matches_hf(
    variant: str, chunk: int, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    engine = make_engine(variant, max_num_batched_tokens=chunk)
    prompts = random_prompts(3, 60, 150, seed=31)  # each chunk reads its window from the sliding group
    outputs = run_checked(engine, prompts, greedy(40), bound=live_bound(window) + 1)
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=40)


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_a_budget_too_small_for_one_pool_preempts_and_matches_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    prompts = random_prompts(4, 35, 45, seed=32)  # each grows to about 160 tokens: 10 blocks
    budget = 12 * one_pool_block_bytes(make_engine(variant))  # one pool: 12 blocks for 40 wanted
    opts: dict[str, Any] = {"kv_cache_bytes": budget, "max_num_seqs": 4, "max_num_batched_tokens": 32}
    engine = make_engine(variant, **opts)
    groups = groups_of(engine)
    cfg = engine.model_config
    num_sliding_layers = sum(cfg.is_sliding(i) for i in range(cfg.num_layers))
    cap = 4 * (live_bound(window) + 1) + 2  # four windows (and a block each) and a 32-token chunk
    assert groups.sliding.num_blocks == min(12, cap)
    full_layers = cfg.num_layers - num_sliding_layers
    assert groups.full.num_blocks == (12 * cfg.num_layers - min(12, cap) * num_sliding_layers) // full_layers
    outputs = run_checked(engine, prompts, greedy(120), bound=live_bound(window))
    assert all(len(o.outputs[0].token_ids) == 120 for o in outputs)
    assert engine.stats().num_preemptions > 0
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=120)
    one_pool = run_checked(make_engine(variant, free_window_blocks=False, **opts), prompts, greedy(120))
    assert [o.outputs[0].token_ids for o in one_pool] == [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_prefix_hits_need_the_whole_prefix_in_full_and_the_window_in_sliding(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant, max_num_batched_tokens=24)  # chunked as well
    shared = random_prompts(1, 100, 100, seed=33)[0]
    prompts = [shared + tail for tail in random_prompts(3, 1, 20, seed=34)] + [shared]
    first = run_checked(engine, prompts[:1], greedy(30))
    groups = groups_of(engine)
    assert groups.full.num_used_blocks == groups.sliding.num_used_blocks == 0
    assert len(groups.full.evictable) >= 6 and len(groups.sliding.evictable) >= 6  # freed, still hashed
    rest = run_checked(engine, prompts[1:], greedy(30))
    assert all(out.num_cached_tokens == 96 for out in rest)
    assert_matches_hf(hf_models[variant], prompts, first + rest, max_tokens=30)
    # the sliding group forgets the prefix's start: a hit still needs only the window before it
    sliding = groups.sliding
    for h in list(sliding.hash_to_block)[:2]:
        block_id = sliding.hash_to_block.pop(h)
        sliding.block_hash[block_id] = None
        del sliding.evictable[block_id]
        sliding.free_ids.append(block_id)
    again = run_checked(engine, [prompts[0]], greedy(30))
    assert again[0].num_cached_tokens == (len(prompts[0]) - 1) // BLOCK_SIZE * BLOCK_SIZE
    assert again[0].outputs[0].token_ids == first[0].outputs[0].token_ids


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_a_full_group_miss_is_a_miss(variant: str, make_engine: EngineFactory) -> None:
    """The full layers read every earlier block, so the hit stops where the full group's blocks do."""
    engine = make_engine(variant)
    prompt = random_prompts(1, 100, 100, seed=35)[0]
    first = run_checked(engine, [prompt], greedy(10))
    full = groups_of(engine).full
    for block_id, h in enumerate(full.block_hash):
        if h is not None and h == block_key(prompt, 2):
            del full.hash_to_block[h]
            full.block_hash[block_id] = None
            del full.evictable[block_id]
            full.free_ids.append(block_id)
    again = run_checked(engine, [prompt], greedy(10))
    assert again[0].num_cached_tokens == 2 * BLOCK_SIZE
    assert again[0].outputs[0].token_ids == first[0].outputs[0].token_ids


def block_key(prompt: list[int], index: int) -> Any:
    """The prefix-cache key of block ``index`` of ``prompt`` (no salt)."""
    seq = Sequence(seq_id=0, request_id="h", token_ids=list(prompt), params=greedy(1), arrival=0)
    return seq.full_block_hashes(BLOCK_SIZE)[index]


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_n_completions_fork_in_both_groups(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    window = hf_models[variant].config.sliding_window
    prompt = random_prompts(1, 70, 70, seed=36)[0]  # prefilled in chunks of 7: the parent frees as it goes
    engine = make_engine(variant, max_num_batched_tokens=7)
    guard_views(engine)
    engine.add_request("greedy", prompt, greedy(40, n=3))
    groups = groups_of(engine)
    shared_full = shared_sliding = False
    done: list[RequestOutput] = []
    while engine.has_unfinished_requests():
        done += [o for o in engine.step() if o.finished]
        engine.check_invariants()
        seqs = engine.requests["greedy"].seqs if "greedy" in engine.requests else []
        if len(seqs) == 3 and all(s.num_computed_tokens > 0 for s in seqs[1:]):
            shared_full = shared_full or max(groups.full.ref_counts) == 3
            shared_sliding = shared_sliding or max(groups.sliding.ref_counts) == 3
            assert all(sliding_live(s) <= live_bound(window) + 1 for s in seqs)
    assert shared_full and shared_sliding  # the children started from the parent's blocks in both
    completions = done[0].outputs
    assert_matches_hf(hf_models[variant], [prompt], [done[0]], max_tokens=40)
    assert all(c.token_ids == completions[0].token_ids for c in completions)


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_sampled_completions_equal_in_both_layouts(variant: str, make_engine: EngineFactory) -> None:
    prompts = random_prompts(2, 50, 80, seed=37)
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=60, ignore_eos=True)
    groups = run_checked(make_engine(variant, max_num_batched_tokens=11), prompts, params)
    one_pool = run_checked(
        make_engine(variant, max_num_batched_tokens=11, free_window_blocks=False), prompts, params
    )
    for a, b in zip(groups, one_pool, strict=True):
        assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    assert len({tuple(c.token_ids) for c in groups[0].outputs}) > 1
