"""Tensor parallelism over gloo on CPU: two ranks give one process's greedy tokens, with batching,
chunked prefill, preemption and prefix-cache hits; splits the heads do not allow are refused."""

from __future__ import annotations

import multiprocessing

import pytest

from tests.backends.engine.parallel.conftest import EngineMaker, assert_same_run, run_scenario

SCENARIO = {"num_blocks": 12, "max_num_batched_tokens": 32, "max_num_seqs": 4}
"""12 blocks of 16 tokens: four prompts of up to 60 tokens growing by 20 cannot all stay resident."""


@pytest.mark.parametrize(
    "variant",
    [
        "gqa",  # 4 query heads, 2 KV heads: each rank holds 2 and 1
        "mqa",  # 4 query heads, 1 KV head: each rank holds 2 and a replica of the KV head
    ],
)
def test_two_ranks_match_one_process(variant: str, make_engine: EngineMaker) -> None:
    one = make_engine(variant, **SCENARIO)
    two = make_engine(variant, tp=2, **SCENARIO)
    assert two.block_manager.num_blocks == one.block_manager.num_blocks == 12
    want = run_scenario(one)
    got = run_scenario(two)
    for engine in (one, two):
        stats = engine.stats()
        assert stats.num_preemptions > 0
        assert stats.prefix_cache_hits >= 2 * 48
    assert got.num_cached_tokens[-2:] == [48, 48]
    assert_same_run(got, want)


def test_a_split_the_query_heads_do_not_allow_is_refused(make_engine: EngineMaker) -> None:
    # refused before any worker starts: the tiny model has 4 query heads and 2 KV heads
    with pytest.raises(ValueError, match=r"tensor_parallel_size=3 does not divide the model's 4 query heads"):
        make_engine("gqa", tp=3)
    assert multiprocessing.active_children() == []
