"""The scorer: blocks held against load, never an overloaded replica, nobody when nobody holds a block."""

from __future__ import annotations

import pytest

from gateway.kv_routing.scorer import Candidate, KvChoice, choose


def test_the_replica_holding_the_most_leading_blocks_wins_at_equal_load() -> None:
    choice = choose([Candidate("a", 1, 2, 10), Candidate("b", 1, 8, 10), Candidate("c", 1, 0, 10)])
    assert choice == KvChoice("b", "kv:8/10 blocks@b", "hit")


def test_load_is_weighed_against_blocks() -> None:
    candidates = [Candidate("a", 3, 10, 10), Candidate("b", 0, 8, 10)]
    assert choose(candidates, load_weight=1.0).label == "b"  # 8 - 0 beats 10 - 3
    assert choose(candidates, load_weight=0.5).label == "a"  # 10 - 1.5 beats 8
    assert choose(candidates, load_weight=1.0).outcome == "override"


def test_an_overloaded_replica_is_never_chosen_however_much_it_holds() -> None:
    candidates = [Candidate("hot", 12, 100, 100), Candidate("b", 0, 0, 100), Candidate("c", 0, 0, 100)]
    choice = choose(candidates, load_weight=0.0, max_load_factor=1.5, min_load_excess=4)
    assert choice.label == "b" and choice.outcome == "override" and choice.reason == "kv:0/100 blocks@b"
    # a small excess (a few requests an engine batches anyway) does not count as overloaded
    few = [Candidate("warm", 2, 100, 100), Candidate("b", 0, 0, 100)]
    assert choose(few, load_weight=0.0, max_load_factor=1.5, min_load_excess=4).label == "warm"


def test_nobody_holding_a_block_leaves_the_choice_to_the_balancer() -> None:
    choice = choose([Candidate("a", 0, 0, 6), Candidate("b", 2, 0, 6)])
    assert choice == KvChoice(None, "kv:0/6 blocks", "miss")


def test_ties_go_to_the_lighter_then_the_earlier_replica() -> None:
    assert choose([Candidate("a", 1, 5, 5), Candidate("b", 1, 5, 5)], load_weight=0).label == "a"
    assert choose([Candidate("a", 2, 5, 5), Candidate("b", 1, 5, 5)], load_weight=0).label == "b"


def test_no_candidates_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        choose([])
