"""Scheduler with fake sequences and no model: budgets, chunking, priority, preemption, never-fits, and
the post-processing of a step (appended tokens, stops, forks)."""

from __future__ import annotations

import itertools

from backends.engine.block_manager import BlockManager
from backends.engine.kv_groups import KVBlocks
from backends.engine.sampler import SampleResult
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


def advance(out: SchedulerOutput, bm: KVBlocks) -> None:
    """``Scheduler.postprocess`` in short, without stop checks: mark tokens computed, free what a window
    passed, append one sampled token."""
    for item in out.scheduled:
        last = item.is_last_chunk
        item.seq.num_computed_tokens += item.num_new_tokens
        bm.cache_full_blocks(item.seq)
        bm.free_out_of_window(item.seq)
        if last:
            item.seq.token_ids.append(7)


def steps_to_first_token(s: Scheduler, seq: Sequence) -> list[list[int]]:
    """Step until ``seq`` samples its first token, checking the blocks after each step; each step's
    scheduled token counts."""
    sizes = []
    while seq.num_output_tokens == 0:
        out = s.schedule()
        sizes.append([i.num_new_tokens for i in out.scheduled])
        advance(out, s.block_manager)
        s.block_manager.check_invariants(s.live_seqs)
    return sizes


def pool(s: Scheduler) -> BlockManager:
    """The scheduler's one block pool, as ``make`` builds it."""
    assert isinstance(s.block_manager, BlockManager)
    return s.block_manager


def make(
    num_blocks: int = 64,
    block_size: int = 4,
    max_num_seqs: int = 8,
    budget: int = 32,
    window: int | None = None,
) -> Scheduler:
    return Scheduler(
        BlockManager(num_blocks, block_size, sliding_window=window),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
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


def scheduled(out: SchedulerOutput) -> list[Sequence]:
    return [item.seq for item in out.scheduled]


def test_a_better_class_prompt_computes_without_worse_classes_decodes() -> None:
    s = make()
    batch = [seq(3, priority=1), seq(3, priority=1)]
    for b in batch:
        s.add(b)
    advance(s.schedule(), s.block_manager)  # both batch prompts done: decodes from here
    interactive = seq(5, priority=0)
    s.add(interactive)
    out = s.schedule()
    assert scheduled(out) == [interactive]  # its first token waits on no batch decode
    assert all(b.status is SequenceStatus.RUNNING and b.block_table for b in batch)  # kept their blocks
    advance(out, s.block_manager)
    assert scheduled(s.schedule()) == [interactive, *batch]  # its decodes share steps again
    s.block_manager.check_invariants(s.live_seqs)


def test_worse_classes_wait_through_every_chunk_of_a_better_class_prompt() -> None:
    s = make(budget=4)
    batch = seq(2, priority=1)
    s.add(batch)
    advance(s.schedule(), s.block_manager)
    interactive = seq(10, priority=0)
    s.add(interactive)
    for num_new in (4, 4, 2):  # chunked by the budget of 4
        out = s.schedule()
        assert scheduled(out) == [interactive] and out.scheduled[0].num_new_tokens == num_new
        advance(out, s.block_manager)
    assert scheduled(s.schedule()) == [interactive, batch]


def test_worse_classes_run_when_the_better_prompt_cannot_start() -> None:
    s = make(max_num_seqs=2)
    batch = [seq(3, priority=1), seq(3, priority=1)]
    for b in batch:
        s.add(b)
    advance(s.schedule(), s.block_manager)
    s.add(seq(3, priority=0))  # no room under max_num_seqs: holding the batch back would gain nothing
    assert scheduled(s.schedule()) == batch


def test_one_class_steps_mix_prefill_and_decodes_as_before() -> None:
    s = make()
    first = seq(3, priority=2)
    s.add(first)
    advance(s.schedule(), s.block_manager)
    late = seq(3, priority=2)
    s.add(late)
    out = s.schedule()
    assert scheduled(out) == [first, late]
    worse = seq(3, priority=5)  # a worse class arriving holds back nobody running...
    s.add(worse)
    assert scheduled(s.schedule()) == [first, late]  # ...and starts once late's prompt is computed
    advance(out, s.block_manager)
    assert scheduled(s.schedule()) == [first, late, worse]


def test_a_worse_class_prompt_never_starts_beside_a_better_one() -> None:
    s = make()
    interactive = seq(3, priority=0)
    s.add(interactive)
    advance(s.schedule(), s.block_manager)  # it decodes from here
    batch = seq(3, priority=1)
    s.add(batch)
    assert scheduled(s.schedule()) == [interactive, batch]  # beside a decode, it starts
    s.finish(batch, "stop")
    batch, late = seq(3, priority=1), seq(5, priority=0)
    s.add(batch)
    s.add(late)
    out = s.schedule()
    assert scheduled(out) == [interactive, late]  # late's prompt computes, so the batch's waits
    advance(out, s.block_manager)
    assert scheduled(s.schedule()) == [interactive, late, batch]
    s.block_manager.check_invariants(s.live_seqs)


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


# -- sliding window: only the blocks a window reads count against the pool -------------------------------


def test_a_window_lets_a_sequence_outgrow_the_pool() -> None:
    s = make(num_blocks=3, block_size=4, window=6)  # 12 slots; without the window it ends at 12 tokens
    a = seq(5)
    s.add(a)
    for _ in range(40):
        out = s.schedule()
        assert [i.seq for i in out.scheduled] == [a] and not out.finished
        advance(out, s.block_manager)
        s.block_manager.check_invariants(s.live_seqs)
    assert a.num_tokens == 45 and s.num_preemptions == 0
    assert pool(s).max_num_used_blocks == 3


def test_a_prompt_longer_than_the_pool_is_prefilled_in_chunks_that_fit() -> None:
    s = make(num_blocks=3, block_size=4, budget=64, window=6)
    a = seq(30)
    s.add(a)
    # each chunk reaches the end of the third block from the window's first key
    assert steps_to_first_token(s, a) == [[12], [4], [4], [4], [4], [2]]
    assert pool(s).max_num_used_blocks == 3


def test_a_pool_narrower_than_the_window_ends_a_long_sequence() -> None:
    s = make(num_blocks=3, block_size=4, window=10)  # 12 slots cannot span 10 keys plus a block
    a = seq(13)
    s.add(a)
    out = s.schedule()
    assert out.finished == [a] and a.finish_reason == "length"
    s.block_manager.check_invariants([])


def test_a_window_admits_sequences_full_attention_would_preempt() -> None:
    for window, num_preemptions in ((None, 1), (6, 0)):
        s = make(num_blocks=6, block_size=4, budget=64, window=window)
        a, b = seq(8), seq(8)
        s.add(a)
        s.add(b)
        for _ in range(6):
            advance(s.schedule(), s.block_manager)
            s.block_manager.check_invariants(s.live_seqs)
        assert s.num_preemptions == num_preemptions


def test_a_preempted_long_sequence_resumes_from_its_cached_window() -> None:
    s = make(num_blocks=5, block_size=4, budget=64, window=6)  # 20 slots
    a = seq(5)
    s.add(a)
    for _ in range(24):
        advance(s.schedule(), s.block_manager)
    # b runs first: its prompt computes in a step of its own (a sits it out), and when both need a
    # third block, a is the one preempted
    b = seq(4, priority=-1)
    s.add(b)
    resumed_at = None
    for _ in range(30):
        was_waiting = a.status is SequenceStatus.WAITING
        out = s.schedule()
        if was_waiting and a.status is SequenceStatus.RUNNING:
            resumed_at = (a.num_computed_tokens, a.num_freed_blocks)
        advance(out, s.block_manager)
        s.block_manager.check_invariants(s.live_seqs)
    assert s.num_preemptions == 1
    # back at 32 of 33 tokens from blocks 6 and 7 alone (keys from 27): the first six never came back
    assert resumed_at == (32, 6)
    assert a.num_tokens > 40 and b.num_tokens > 20


# -- postprocess -------------------------------------------------------------------------------------
class CharDetokenizer:
    """Each token's text is the character of its id."""

    def step(self, token_ids: list[int]) -> str:
        return chr(token_ids[-1])


def text_seq(prompt: str, params: SamplingParams, *, index: int = 0, seq_id: int | None = None) -> Sequence:
    n = next(_ids) if seq_id is None else seq_id
    s = Sequence(
        seq_id=n, request_id="r", token_ids=[ord(c) for c in prompt], params=params, arrival=0, index=index
    )
    s.detokenizer = CharDetokenizer()
    return s


def run_step(sched: Scheduler, tokens: list[int]) -> list[Sequence]:
    out = sched.schedule()
    sampling = [item for item in out.scheduled if item.is_last_chunk]
    result = SampleResult([[t] for t in tokens[: len(sampling)]], [None] * len(sampling))
    return sched.postprocess(out.scheduled, result)


def test_postprocess_appends_and_stops_on_eos_stop_strings_and_limits() -> None:
    sched = Scheduler(
        BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=64, eos_token_id=0, max_model_len=9
    )
    eos, stop, length, model_len = (
        text_seq("abcd", SamplingParams()),
        text_seq("abcd", SamplingParams(stop=["yz"])),
        text_seq("abcd", SamplingParams(max_tokens=2)),
        text_seq("abcd", SamplingParams()),
    )
    for s in (eos, stop, length, model_len):
        sched.add(s)
    assert run_step(sched, [ord("x")] * 4) == [eos, stop, length, model_len]
    assert [s.text for s in (eos, stop, length, model_len)] == ["x"] * 4
    run_step(sched, [0, ord("y"), ord("y"), ord("y")])
    assert eos.finish_reason == "stop" and eos.output_token_ids == [ord("x"), 0]
    assert length.finish_reason == "length" and length.num_output_tokens == 2
    run_step(sched, [ord("z"), ord("w"), ord("w")])
    assert stop.finish_reason == "stop" and stop.text == "x"  # the stop string is cut off
    assert (eos.stop_reason, stop.stop_reason, length.stop_reason) == (None, "yz", None)  # as vLLM's
    run_step(sched, [ord("w")])
    assert not model_len.is_finished
    run_step(sched, [ord("w")])  # its ninth token fills max_model_len
    assert model_len.finish_reason == "length" and model_len.num_tokens == 9
    assert not sched.has_unfinished() and sched.num_generated_tokens == 2 + 2 + 3 + 5
    assert sched.block_manager.num_free_blocks == 64


def test_postprocess_records_logprobs_with_token_text() -> None:
    sched = Scheduler(
        BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=64, token_text=lambda t: f"<{t}>"
    )
    s = text_seq("ab", SamplingParams(logprobs=1, max_tokens=1))
    s.logprobs = []
    sched.add(s)
    out = sched.schedule()
    sched.postprocess(out.scheduled, SampleResult([[ord("c")]], [(-0.5, [(ord("c"), -0.5)])]))
    [(chosen, top)] = s.logprobs
    assert (chosen.token_id, chosen.logprob, chosen.decoded) == (ord("c"), -0.5, "<99>")
    assert [t.decoded for t in top] == ["<99>"]


def test_forks_join_once_the_parent_samples_and_share_its_prompt_blocks() -> None:
    sched = make(num_blocks=16, block_size=4)
    params = SamplingParams(n=3, max_tokens=2)
    parent, *children = (text_seq("abcdefghi", params, index=i) for i in range(3))
    sched.add(parent, forks=children)
    assert run_step(sched, [ord("x")]) == [parent]
    assert sched.running == [parent] and sched.waiting == children  # they start as waiting ones do
    assert all(c.block_table[:2] == parent.block_table[:2] for c in children)
    assert all(c.num_computed_tokens == 8 for c in children)  # only the tail is left to compute
    sched.block_manager.check_invariants(sched.live_seqs)
    out = sched.schedule()
    assert sched.running == [parent, *children]
    assert [(i.seq, i.num_new_tokens) for i in out.scheduled] == [
        (parent, 1),
        (children[0], 1),
        (children[1], 1),
    ]


def test_a_parent_that_ends_before_forking_ends_its_children() -> None:
    sched = make()
    params = SamplingParams(n=2)
    parent, child = text_seq("abc", params), text_seq("abc", params, index=1)
    sched.add(parent, forks=[child])
    parent.error = "boom"
    sched.finish(parent, "error")
    assert child.is_finished and (child.finish_reason, child.error) == ("error", "boom")
    assert sched.forks == {}
