"""The layout arithmetic: which splits a model allows, and which heads, layers and vocabulary rows each rank
holds (no processes)."""

from __future__ import annotations

import pytest

from backends.engine.config import EngineConfig
from backends.engine.kv_sizing import plan_kv_pools, rank_share
from backends.engine.model_config import ModelConfig
from backends.engine.parallel.group import HeadSplit, ParallelLayout


def model(
    num_heads: int, num_kv_heads: int, *, num_layers: int = 30, intermediate_size: int = 1536
) -> ModelConfig:
    return ModelConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=intermediate_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=64,
    )


SMOLLM2 = model(9, 3)
"""SmolLM2-135M's heads: 9 query heads, 3 KV heads."""
GEMMA3_270M = model(4, 1, num_layers=18, intermediate_size=2048)
"""Gemma 3 270M's heads: 4 query heads, 1 KV head."""


def test_smollm2_splits_over_three_ranks_not_two() -> None:
    ParallelLayout(tensor_parallel_size=3).check(SMOLLM2)
    with pytest.raises(
        ValueError, match=r"tensor_parallel_size=2 does not divide the model's 9 query heads \(3 KV"
    ):
        ParallelLayout(tensor_parallel_size=2).check(SMOLLM2)


def test_gemma3_splits_over_two_ranks_by_replicating_its_kv_head() -> None:
    layout = ParallelLayout(tensor_parallel_size=2)
    layout.check(GEMMA3_270M)
    assert [layout.split_heads(4, 1, r) for r in (0, 1)] == [HeadSplit(2, 1, 0, 0), HeadSplit(2, 1, 2, 0)]
    assert layout.kv_heads_per_rank(1) == 1


def test_kv_heads_split_or_replicate() -> None:
    four = ParallelLayout(tensor_parallel_size=4)
    # 8 query heads, 2 KV heads over 4 ranks: ranks 0-1 read KV head 0, ranks 2-3 KV head 1
    assert [four.split_heads(8, 2, r).first_kv_head for r in range(4)] == [0, 0, 1, 1]
    # 8 KV heads over 4 ranks: two each
    assert [(s.num_kv_heads, s.first_kv_head) for s in (four.split_heads(8, 8, r) for r in range(4))] == [
        (2, 0),
        (2, 2),
        (2, 4),
        (2, 6),
    ]
    with pytest.raises(ValueError, match="neither divides the model's 6 KV heads"):
        four.check(model(12, 6))
    with pytest.raises(ValueError, match="MLP size 1537"):
        ParallelLayout(tensor_parallel_size=2).check(model(4, 2, intermediate_size=1537))


def test_stages_are_contiguous_and_the_later_ones_take_the_remainder() -> None:
    layout = ParallelLayout(pipeline_parallel_size=4)
    stages = [layout.stage_layers(30, s) for s in range(4)]
    assert [(s.start, s.stop) for s in stages] == [(0, 7), (7, 14), (14, 22), (22, 30)]
    assert layout.max_stage_layers(30) == 8
    with pytest.raises(ValueError, match="more stages than the model's 3 layers"):
        layout.check(model(4, 2, num_layers=3))


def test_ranks_are_stage_major() -> None:
    layout = ParallelLayout(tensor_parallel_size=2, pipeline_parallel_size=3)
    assert layout.world_size == 6
    assert [layout.coords(r) for r in range(6)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def test_vocabulary_slices_are_equal_and_the_last_is_padded() -> None:
    layout = ParallelLayout(tensor_parallel_size=2)
    assert [layout.vocab_rows(259, r) for r in (0, 1)] == [(0, 130), (130, 130)]


def test_a_rank_plans_the_blocks_of_its_own_heads_and_layers() -> None:
    config = EngineConfig(model="unused", tensor_parallel_size=3, pipeline_parallel_size=2)
    rank_cfg, budget = rank_share(SMOLLM2, config, 15 << 20)
    assert rank_cfg.num_kv_heads == 1 and budget == (15 << 20) * 2
    # per rank, a block holds one KV head of 15 layers: the same budget as one process with a sixth of the
    # whole model's bytes a block
    one = plan_kv_pools(SMOLLM2, EngineConfig(model="unused"), 6 * (15 << 20), 4, None, 8192)
    split = plan_kv_pools(rank_cfg, config, budget, 4, None, 8192)
    assert split.num_blocks == one.num_blocks
