"""Pipeline parallelism over gloo on CPU: two stages (and two stages of two tensor ranks) give one
process's greedy tokens, with batching, chunked prefill, preemption and prefix-cache hits."""

from __future__ import annotations

import pytest

from tests.backends.engine.parallel.conftest import EngineMaker, assert_same_run, run_scenario

SCENARIO = {"num_blocks": 12, "max_num_batched_tokens": 32, "max_num_seqs": 4}
"""12 blocks of 16 tokens: four prompts of up to 60 tokens growing by 20 cannot all stay resident."""


@pytest.mark.parametrize(
    ("variant", "tp"),
    [
        ("gqa", 1),  # one layer a stage
        ("tied", 2),  # four ranks: the last stage's LM head is its vocabulary slice of the embedding
    ],
)
def test_two_stages_match_one_process(variant: str, tp: int, make_engine: EngineMaker) -> None:
    one = make_engine(variant, **SCENARIO)
    staged = make_engine(variant, tp=tp, pp=2, **SCENARIO)
    assert staged.block_manager.num_blocks == one.block_manager.num_blocks == 12
    want = run_scenario(one)
    got = run_scenario(staged)
    for engine in (one, staged):
        stats = engine.stats()
        assert stats.num_preemptions > 0
        assert stats.prefix_cache_hits >= 2 * 48
    assert_same_run(got, want)


def test_gemma3_stages_split_its_sliding_and_full_layers(make_engine: EngineMaker) -> None:
    # layers [sliding, full | sliding, sliding]: the second stage holds no full layer, so its
    # full-attention pool is empty; two KV groups, a softcapped LM head, one KV head for four query heads
    one = make_engine("gemma3_window20", max_num_batched_tokens=32)
    staged = make_engine("gemma3_window20", pp=2, max_num_batched_tokens=32)
    assert_same_run(run_scenario(staged), run_scenario(one))
