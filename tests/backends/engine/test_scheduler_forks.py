"""n > 1 forks under ``max_num_seqs``: each completion counts toward the cap, those beyond it wait holding
their share of the prompt's blocks and start as room frees, and nothing leaks or stalls."""

from __future__ import annotations

from backends.engine.block_manager import BlockManager
from backends.engine.sampler import SampleResult
from backends.engine.sampling_params import SamplingParams
from backends.engine.scheduler import Scheduler
from backends.engine.sequence import Sequence
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_llm_engine import PROMPT
from tests.backends.engine.test_scheduler import run_step, text_seq


def completions(prompt: str, n: int, max_tokens: int, priority: int = 0) -> list[Sequence]:
    """The n completions of one request (the first is the parent, the rest its forks)."""
    params = SamplingParams(n=n, max_tokens=max_tokens)
    seqs = [text_seq(prompt, params, index=i) for i in range(n)]
    for s in seqs:
        s.priority = priority
    return seqs


def step(sched: Scheduler) -> None:
    """One step that samples "x" for every last chunk, checking the cap and the blocks."""
    out = sched.schedule()
    assert len(out.scheduled) <= sched.max_num_seqs and len(sched.running) <= sched.max_num_seqs
    num_sampling = sum(item.is_last_chunk for item in out.scheduled)
    sched.postprocess(out.scheduled, SampleResult([[ord("x")]] * num_sampling, [None] * num_sampling))
    sched.block_manager.check_invariants(sched.live_seqs)


def test_forks_beyond_max_num_seqs_wait_and_all_finish() -> None:
    sched = Scheduler(BlockManager(32, 4), max_num_seqs=2, max_num_batched_tokens=64)
    parent, *children = completions("abcdefghij", n=5, max_tokens=6)
    sched.add(parent, forks=children)
    step(sched)
    assert sched.running == [parent] and sched.waiting == children
    assert all(c.block_table == parent.block_table[:2] for c in children)  # they share its prompt blocks
    while sched.has_unfinished():
        step(sched)
    assert all(
        s.finish_reason == "length" and s.output_token_ids == [ord("x")] * 6 for s in (parent, *children)
    )
    assert sched.block_manager.num_free_blocks == 32


def test_waiting_forks_give_their_blocks_back_when_nothing_runs_to_free_any() -> None:
    sched = Scheduler(BlockManager(6, 4), max_num_seqs=1, max_num_batched_tokens=32)
    parent, *children = completions("abcdefghi", n=3, max_tokens=1)
    sched.add(parent, forks=children)
    run_step(sched, [ord("x")])  # the parent samples its only token: its forks wait holding 2 blocks
    assert parent.is_finished and all(c.num_computed_tokens == 8 for c in children)
    [big] = completions("a" * 21, n=1, max_tokens=1, priority=-1)  # needs the whole pool
    sched.add(big)
    for _ in range(20):
        if not sched.has_unfinished():
            break
        run_step(sched, [ord("y")])
        sched.block_manager.check_invariants(sched.live_seqs)
    assert big.finish_reason == "length" and all(c.finish_reason == "length" for c in children)
    assert sched.block_manager.num_free_blocks == 6


def test_an_engine_caps_forks_and_aborting_frees_every_block(make_engine: EngineFactory) -> None:
    engine = make_engine(max_num_seqs=2)
    params = SamplingParams(n=5, temperature=1.0, seed=3, max_tokens=6, ignore_eos=True)
    bm = engine.block_manager
    free_at_start = bm.num_free_blocks
    engine.add_request("n5", PROMPT * 2, params)
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
        assert len(engine.scheduler.running) <= 2
        engine.check_invariants()
    [done] = [o for o in outs if o.finished]
    assert [len(c.token_ids) for c in done.outputs] == [6] * 5
    assert bm.num_free_blocks == free_at_start
    wide = make_engine(max_num_seqs=8).generate([PROMPT * 2], params)[0]
    assert [c.token_ids for c in wide.outputs] == [c.token_ids for c in done.outputs]  # same completions
    engine.add_request("aborted", PROMPT * 2, params)
    for _ in range(3):
        engine.step()
    assert any(s.block_table for s in engine.scheduler.waiting)  # forks wait behind the cap, holding blocks
    engine.abort_request("aborted")
    engine.check_invariants()
    assert bm.num_free_blocks == free_at_start
