"""``Sequence.stop_reason``, recorded where ``Scheduler.postprocess`` checks each appended token: the stop
string or ``stop_token_ids`` id that ended a sequence, None for eos (even one listed among the stop ids)
and for lengths, as vLLM's ``stop_reason``."""

from __future__ import annotations

from backends.engine.block_manager import BlockManager
from backends.engine.sampling_params import SamplingParams
from backends.engine.scheduler import Scheduler
from tests.backends.engine.test_scheduler import run_step, text_seq

EOS = 0


def make() -> Scheduler:
    return Scheduler(BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=64, eos_token_id=EOS)


def test_a_stop_token_id_is_named_and_eos_is_not() -> None:
    sched = make()
    stop_id, eos_listed, eos_ignored, running = (
        text_seq("ab", SamplingParams(stop_token_ids=[ord("!")])),
        text_seq("ab", SamplingParams(stop_token_ids=[EOS])),
        text_seq("ab", SamplingParams(stop_token_ids=[EOS], ignore_eos=True)),
        text_seq("ab", SamplingParams(stop_token_ids=[ord("!")])),
    )
    for s in (stop_id, eos_listed, eos_ignored, running):
        sched.add(s)
    run_step(sched, [ord("!"), EOS, EOS, ord("x")])
    assert [s.finish_reason for s in (stop_id, eos_listed, eos_ignored)] == ["stop"] * 3
    assert (stop_id.stop_reason, eos_listed.stop_reason, eos_ignored.stop_reason) == (ord("!"), None, EOS)
    assert not running.is_finished and running.stop_reason is None


def test_the_stop_string_that_cut_the_text_is_named() -> None:
    sched = make()
    s = text_seq("ab", SamplingParams(stop=["zz", "xy"], stop_token_ids=[ord("y")]))
    sched.add(s)
    run_step(sched, [ord("x")])
    assert s.stop_reason is None
    run_step(sched, [ord("y")])  # a stop id ends it before any stop string is looked for
    assert (s.finish_reason, s.stop_reason, s.text) == ("stop", ord("y"), "xy")
    other = text_seq("ab", SamplingParams(stop=["zz", "xy"]))
    sched.add(other)
    run_step(sched, [ord("x")])
    run_step(sched, [ord("y")])
    assert (other.finish_reason, other.stop_reason, other.text) == ("stop", "xy", "")
