"""How rank 0 splits a step into micro-batches (no processes): as many as stages, never more than
sequences, contiguous runs balanced by tokens; and the engine option and server flag that set it."""

from __future__ import annotations

import pytest

from backends.engine.config import EngineConfig
from backends.engine.parallel.micro_batches import count, split
from backends.server import parse_args


@pytest.mark.parametrize(
    ("setting", "stages", "seqs", "want"),
    [
        (0, 2, 32, 2),  # automatic: one a stage
        (0, 4, 3, 3),  # automatic, fewer sequences than stages: one a sequence
        (0, 2, 1, 1),
        (1, 2, 32, 1),  # the whole batch at once
        (8, 2, 5, 5),  # never more than sequences
        (4, 1, 32, 1),  # one stage: nothing to overlap
    ],
)
def test_count(setting: int, stages: int, seqs: int, want: int) -> None:
    assert count(setting, stages, seqs) == want


def test_automatic_is_one_over_nccl_where_the_order_has_not_run() -> None:
    assert count(0, 2, 32, backend="nccl") == 1
    assert count(2, 2, 32, backend="nccl") == 2  # as asked


def test_split_balances_tokens_in_contiguous_runs() -> None:
    assert split([1, 1, 1, 1], 2) == [range(0, 2), range(2, 4)]
    assert split([30, 1, 1, 1], 2) == [range(0, 1), range(1, 4)]  # one prefill against three decodes
    assert split([1, 1, 1, 30], 2) == [range(0, 3), range(3, 4)]
    assert split([10, 10, 10], 3) == [range(0, 1), range(1, 2), range(2, 3)]
    assert split([5], 1) == [range(0, 1)]


def test_split_leaves_no_run_empty() -> None:
    for sizes in ([100, 1, 1, 1], [1, 1, 1, 100], [1, 100, 100, 1, 1], [7] * 9):
        for parts in range(1, len(sizes) + 1):
            runs = split(sizes, parts)
            assert len(runs) == parts
            assert all(len(run) > 0 for run in runs)
            assert [i for run in runs for i in run] == list(range(len(sizes)))


def test_the_option_is_checked_and_the_flag_reaches_it() -> None:
    with pytest.raises(ValueError, match="pipeline_micro_batches must be >= 0"):
        EngineConfig(model="m", pipeline_micro_batches=-1)
    args = parse_args(["--model", "smollm2-135m", "-pp", "2", "--pipeline-micro-batches", "3"])
    assert args.pipeline_micro_batches == 3
    assert parse_args(["--model", "smollm2-135m"]).pipeline_micro_batches == 0
