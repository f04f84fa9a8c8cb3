"""The long-prefill cap (``long_prefill_token_threshold``): a long prompt prefills in chunks of the cap
however large the step's budget, and a short prompt or a decode beside it gets its token in the next
step instead of after the whole prefill."""

from __future__ import annotations

import pytest

from backends.engine.block_manager import BlockManager
from backends.engine.config import EngineConfig
from backends.engine.scheduler import Scheduler
from tests.backends.engine.test_scheduler import advance, seq, steps_to_first_token


def make(budget: int, cap: int) -> Scheduler:
    return Scheduler(
        BlockManager(64, 4), max_num_seqs=8, max_num_batched_tokens=budget, long_prefill_token_threshold=cap
    )


def test_a_long_prompt_prefills_in_chunks_of_the_cap() -> None:
    s = make(budget=100, cap=8)
    a = seq(25)
    s.add(a)
    assert steps_to_first_token(s, a) == [[8], [8], [8], [1]]
    out = s.schedule()  # its decodes cost one token, as ever
    assert [i.num_new_tokens for i in out.scheduled] == [1]


@pytest.mark.parametrize(("cap", "short_first_token_step"), [(0, 3), (8, 1)])
def test_a_short_prompt_starts_beside_a_long_prefill(cap: int, short_first_token_step: int) -> None:
    """Without the cap the long prompt's chunks take every step's budget until it is done, and the
    short prompt that arrived meanwhile waits; with it, the short one is done in the next step."""
    s = make(budget=16, cap=cap)
    long, short = seq(56), seq(4)
    s.add(long)
    advance(s.schedule(), s.block_manager)  # the long prompt is prefilling when the short one arrives
    s.add(short)
    step = 0
    while short.num_output_tokens == 0:
        step += 1
        out = s.schedule()
        assert out.num_batched_tokens <= 16
        advance(out, s.block_manager)
    assert step == short_first_token_step
    assert long.num_output_tokens == (1 if cap == 0 else 0)  # capped, the long one is still prefilling


def test_the_cap_counts_only_the_tokens_not_cached() -> None:
    """A prompt whose leading blocks are cached computes up to the cap of what is left."""
    s = make(budget=100, cap=8)
    first = seq(20)
    s.add(first)
    while first.num_output_tokens == 0:
        advance(s.schedule(), s.block_manager)
    again = seq(0)
    again.token_ids = [*first.token_ids[:20], 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # 20 cached + 10 new
    s.add(again)
    out = s.schedule()
    item = next(i for i in out.scheduled if i.seq is again)
    assert again.num_computed_tokens == 20 and item.num_new_tokens == 8


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        EngineConfig(model="m", long_prefill_token_threshold=-1)
