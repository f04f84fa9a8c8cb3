"""A step's share for worse priority classes: a few prompt tokens while a better class runs or waits,
a few decodes beside a better class's, nothing capped with one class or a cap of 0."""

from __future__ import annotations

import pytest

from backends.engine.background import BackgroundLimits, BackgroundShare
from backends.engine.block_manager import BlockManager
from backends.engine.config import EngineConfig
from backends.engine.scheduler import Scheduler
from backends.engine.sequence import Sequence
from tests.backends.engine.test_scheduler import advance, scheduled, seq


def decoding(priority: int) -> Sequence:
    s = seq(3, priority=priority)
    s.num_computed_tokens = 2  # its prompt computed: a decode
    return s


def test_worse_class_decodes_beside_a_better_class_are_capped_in_arrival_order() -> None:
    share = BackgroundShare(BackgroundLimits(decode_seqs=2))
    better, *batch = [decoding(0), decoding(1), decoding(1), decoding(1)]
    share.start_step([better, *batch], [])
    assert [share.grant(s, 1) for s in (better, *batch)] == [1, 1, 1, 0]


def test_one_class_and_a_zero_cap_cap_nothing() -> None:
    batch = [decoding(1) for _ in range(4)]
    share = BackgroundShare(BackgroundLimits(prefill_tokens=4, decode_seqs=2))
    share.start_step(batch, [])  # the batch alone: it has the whole step
    assert [share.grant(s, 1) for s in batch] == [1] * 4
    assert share.grant(seq(10, priority=1), 10) == 10
    share = BackgroundShare(BackgroundLimits())
    share.start_step([decoding(0), *batch], [])
    assert [share.grant(s, 1) for s in batch] == [1] * 4


def test_prompt_tokens_are_shared_while_a_better_class_only_waits() -> None:
    share = BackgroundShare(BackgroundLimits(prefill_tokens=6, decode_seqs=1))
    batch = [decoding(1), decoding(1)]
    share.start_step(batch, [seq(3, priority=0)])
    assert [share.grant(s, 1) for s in batch] == [1, 1]  # no better class decodes: no decode cap
    assert [share.grant(seq(10, priority=1), 10) for _ in range(3)] == [6, 0, 0]


def test_the_scheduler_runs_the_earliest_lines_beside_an_interactive_decode() -> None:
    s = Scheduler(
        BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=32, background=BackgroundLimits(0, 1)
    )
    batch = [seq(3, priority=1), seq(3, priority=1)]
    for b in batch:
        s.add(b)
    advance(s.schedule(), s.block_manager)
    interactive = seq(3, priority=0)
    s.add(interactive)
    advance(s.schedule(), s.block_manager)  # its prompt, in a step of its own
    for _ in range(2):  # beside its decodes, the earlier line only; the later one keeps its blocks
        out = s.schedule()
        assert scheduled(out) == [interactive, batch[0]]
        advance(out, s.block_manager)
    assert batch[1].block_table
    s.finish(interactive, "stop")
    assert scheduled(s.schedule()) == batch  # alone, both run
    s.block_manager.check_invariants(s.live_seqs)


def test_the_cpu_caps_by_default_cuda_does_not_and_a_setting_wins() -> None:
    assert EngineConfig(model="x").background_on("cpu") == BackgroundLimits(16, 2)
    assert EngineConfig(model="x").background_on("cuda") == BackgroundLimits()
    set_ = EngineConfig(model="x", background_prefill_tokens=0, background_decode_seqs=4)
    assert set_.background_on("cpu") == set_.background_on("cuda") == BackgroundLimits(0, 4)
    with pytest.raises(ValueError, match="background_decode_seqs"):
        EngineConfig(model="x", background_decode_seqs=-1)


def test_worse_class_prompts_compute_in_small_chunks_beside_a_better_class() -> None:
    s = Scheduler(
        BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=32, background=BackgroundLimits(4)
    )
    interactive = seq(3, priority=0)
    s.add(interactive)
    advance(s.schedule(), s.block_manager)  # interactive decodes from here
    batch = seq(10, priority=1)
    s.add(batch)
    chunks: list[dict[int, int]] = []
    while batch.num_computed_tokens < batch.num_tokens - 1 or not chunks:
        out = s.schedule()
        chunks.append({item.seq.seq_id: item.num_new_tokens for item in out.scheduled})
        advance(out, s.block_manager)
    assert chunks == [{interactive.seq_id: 1, batch.seq_id: 4}] * 2 + [
        {interactive.seq_id: 1, batch.seq_id: 2}
    ]
    s.finish(interactive, "stop")
    late = seq(10, priority=1)
    s.add(late)
    assert s.schedule().scheduled[-1].num_new_tokens == 10  # no better class runs: no cap


def test_worse_class_prompts_share_one_small_budget_a_step() -> None:
    s = Scheduler(
        BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=32, background=BackgroundLimits(6)
    )
    first, second, interactive = seq(10, priority=1), seq(10, priority=1), seq(3, priority=0)
    for each in (first, second, interactive):
        s.add(each)
    out = s.schedule()  # all waiting: the interactive prompt first, in a step of its own
    assert [(item.seq, item.num_new_tokens) for item in out.scheduled] == [(interactive, 3)]
    advance(out, s.block_manager)
    out = s.schedule()  # beside its decode, the batch's prompts share 6 tokens
    assert [(item.seq, item.num_new_tokens) for item in out.scheduled] == [(interactive, 1), (first, 6)]
