"""Scheduler with fake sequences and no model: budgets, chunking, priority, preemption, never-fits."""

from __future__ import annotations

import itertools

from backends.engine.block_manager import BlockManager
from backends.engine.sampling_params import SamplingParams
from backends.engine.scheduler import Scheduler, SchedulerOutput
from backends.engine.sequence import Sequence, SequenceStatus

_ids = itertools.count()


def seq(num_tokens: int, priority: int = 0) -> Sequence:
    n = next(_ids)
    return Sequence(
        seq_id=n,
        request_id=f"r{n}",
        token_ids=[n % 50 + 1000 + i for i in range(num_tokens)],
        params=SamplingParams(),
        arrival=n,
        priority=priority,
    )


def advance(out: SchedulerOutput, bm: BlockManager) -> None:
    """What the engine does after a step: mark tokens computed, append one sampled token."""
    for item in out.scheduled:
        last = item.is_last_chunk
        item.seq.num_computed_tokens += item.num_new_tokens
        bm.cache_full_blocks(item.seq)
        if last:
            item.seq.token_ids.append(7)


def make(num_blocks: int = 64, block_size: int = 4, max_num_seqs: int = 8, budget: int = 32) -> Scheduler:
    return Scheduler(
        BlockManager(num_blocks, block_size), max_num_seqs=max_num_seqs, max_num_batched_tokens=budget
    )


def test_prefill_is_chunked_by_the_token_budget() -> None:
    s = make(budget=10)
    a = seq(25)
    s.add(a)
    sizes = []
    for _ in range(3):
        out = s.schedule()
        sizes.append([i.num_new_tokens for i in out.scheduled])
        advance(out, s.block_manager)
    assert sizes == [[10], [10], [5]]
    assert a.num_output_tokens == 1


def test_decodes_and_prefill_chunks_share_a_step() -> None:
    s = make(budget=8)
    a = seq(4)
    s.add(a)
    advance(s.schedule(), s.block_manager)
    b = seq(20)
    s.add(b)
    out = s.schedule()
    assert [(i.seq, i.num_new_tokens) for i in out.scheduled] == [(a, 1), (b, 7)]


def test_max_num_seqs_caps_running() -> None:
    s = make(max_num_seqs=2)
    for _ in range(4):
        s.add(seq(3))
    out = s.schedule()
    assert len(out.scheduled) == 2 and len(s.waiting) == 2


def test_priority_orders_admission() -> None:
    s = make(max_num_seqs=1)
    low, high = seq(3, priority=5), seq(3, priority=-1)
    s.add(low)
    s.add(high)
    assert s.schedule().scheduled[0].seq is high


def test_preemption_frees_the_latest_and_requeues_it() -> None:
    s = make(num_blocks=4, block_size=4, budget=64)
    a, b = seq(8), seq(8)
    s.add(a)
    s.add(b)
    advance(s.schedule(), s.block_manager)  # both hold 2 full blocks; 9 tokens each now
    out = s.schedule()  # each needs a third block: b is preempted so a can grow
    assert [i.seq for i in out.scheduled] == [a]
    assert b.status is SequenceStatus.WAITING and b.block_table == [] and s.num_preemptions == 1
    s.block_manager.check_invariants(s.live_seqs)


def test_sequence_bigger_than_the_pool_ends_with_length() -> None:
    s = make(num_blocks=2, block_size=4)
    a = seq(8)
    s.add(a)
    for _ in range(3):
        out = s.schedule()
        advance(out, s.block_manager)
        if out.finished:
            break
    assert a.finish_reason == "length" and not s.has_unfinished()
    s.block_manager.check_invariants([])


def test_finish_frees_waiting_and_running() -> None:
    s = make()
    a, b = seq(5), seq(5)
    s.add(a)
    advance(s.schedule(), s.block_manager)
    s.add(b)
    s.finish(a, "abort")
    s.finish(b, "abort")
    assert not s.has_unfinished()
    assert s.block_manager.num_free_blocks == s.block_manager.num_blocks
