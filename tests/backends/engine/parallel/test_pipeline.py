"""Pipeline parallelism over gloo on CPU: two stages (and two stages of two tensor ranks) give one
process's greedy tokens, with batching, chunked prefill, preemption and prefix-cache hits, whether a
step crosses the stages whole or as micro-batches in flight; a rank that dies fails the step."""

from __future__ import annotations

import pytest

from backends.engine.errors import EngineDeadError
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.parallel.conftest import EngineMaker, Run, assert_same_run, run_scenario

SCENARIO = {"num_blocks": 12, "max_num_batched_tokens": 32, "max_num_seqs": 4}
"""12 blocks of 16 tokens: four prompts of up to 60 tokens growing by 20 cannot all stay resident."""

_ONE_PROCESS: dict[str, Run] = {}
"""The one-process run of each variant, computed once (it is deterministic)."""


def one_process(variant: str, make_engine: EngineMaker) -> Run:
    if variant not in _ONE_PROCESS:
        one = make_engine(variant, **SCENARIO)
        assert one.block_manager.num_blocks == 12
        _ONE_PROCESS[variant] = run_scenario(one)
        stats = one.stats()
        assert stats.num_preemptions > 0
        assert stats.prefix_cache_hits >= 2 * 48
    return _ONE_PROCESS[variant]


@pytest.mark.parametrize(
    ("variant", "tp", "micro_batches"),
    [
        ("gqa", 1, 1),  # one layer a stage; each step's batch through the stages whole
        ("gqa", 1, 2),  # two micro-batches in flight
        ("gqa", 1, 0),  # automatic: one a stage
        ("tied", 2, 0),  # four ranks: the last stage's LM head is its vocabulary slice of the embedding
    ],
)
def test_two_stages_match_one_process(
    variant: str, tp: int, micro_batches: int, make_engine: EngineMaker
) -> None:
    want = one_process(variant, make_engine)
    staged = make_engine(variant, tp=tp, pp=2, pipeline_micro_batches=micro_batches, **SCENARIO)
    assert staged.block_manager.num_blocks == 12
    got = run_scenario(staged)
    stats = staged.stats()
    assert stats.num_preemptions > 0
    assert stats.prefix_cache_hits >= 2 * 48
    assert_same_run(got, want)
    workers = staged.workers
    assert workers is not None
    if micro_batches == 1:
        assert workers.num_micro_batches == workers.num_steps
    else:  # steps of several sequences went as two micro-batches, never more
        assert workers.num_steps < workers.num_micro_batches <= 2 * workers.num_steps


def test_gemma3_stages_split_its_sliding_and_full_layers(make_engine: EngineMaker) -> None:
    # layers [sliding, full | sliding, sliding]: the second stage holds no full layer, so its
    # full-attention pool is empty; two KV groups, a softcapped LM head, one KV head for four query heads
    one = make_engine("gemma3_window20", max_num_batched_tokens=32)
    staged = make_engine("gemma3_window20", pp=2, max_num_batched_tokens=32)
    assert_same_run(run_scenario(staged), run_scenario(one))
    assert staged.workers is not None and staged.workers.num_micro_batches > staged.workers.num_steps


def test_a_killed_stage_fails_the_step(make_engine: EngineMaker) -> None:
    engine = make_engine("gqa", pp=2)
    assert engine.workers is not None
    worker = engine.workers.processes[0]
    params = SamplingParams(temperature=0.0, max_tokens=2000, ignore_eos=True)
    for i in range(3):
        engine.add_request(f"r{i}", list(range(1, 30)), params)
    engine.step()
    assert engine.workers.num_micro_batches == 2  # the three prompts went as two micro-batches
    worker.kill()
    worker.join(timeout=60)  # waits for the exit; the bound only catches a kill that never lands
    with pytest.raises(EngineDeadError, match=r"rank 1 \(pid \d+\) died \(signal SIGKILL\)"):
        for _ in range(2000):  # the first step after the death fails (a safety bound, never reached)
            engine.step()
    assert all(engine.requests[f"r{i}"].seqs[0].error for i in range(3))
