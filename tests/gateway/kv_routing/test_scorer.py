"""The scorer: blocks held against load, never an overloaded replica, nobody when nobody holds a block."""

from __future__ import annotations

import pytest

from gateway.kv_routing.scorer import Candidate, KvChoice, choose


def test_the_replica_holding_the_most_leading_blocks_wins_at_equal_load() -> None:
    choice = choose([Candidate("a", 1, 2, 10), Candidate("b", 1, 8, 10), Candidate("c", 1, 0, 10)])
    assert choice == KvChoice("b", "kv:8/10 blocks@b", "hit")


def test_load_is_weighed_against_the_share_of_the_prompt_held() -> None:
    candidates = [Candidate("a", 3, 10, 10), Candidate("b", 0, 8, 10)]
    assert choose(candidates, load_weight=0.1).label == "b"  # 0.8 - 0 beats 1.0 - 0.3
    assert choose(candidates, load_weight=0.05).label == "a"  # 1.0 - 0.15 beats 0.8
    assert choose(candidates, load_weight=0.1).outcome == "override"


def test_a_next_turn_stays_while_a_new_conversation_spreads() -> None:
    # a conversation's next turn: its replica holds 19 of the prompt's 20 blocks, 2 requests in flight
    next_turn = [Candidate("home", 2, 19, 20), Candidate("idle", 0, 0, 20)]
    assert choose(next_turn).label == "home"
    assert choose([Candidate("home", 3, 19, 20), Candidate("idle", 0, 0, 20)]).label is None
    # a new conversation sharing only the system prompt (7 of 20 blocks) with a replica one request
    # busier than another: it goes to the other, which then holds that system prompt too
    new = [Candidate("holder", 1, 7, 20), Candidate("idle", 0, 0, 20)]
    assert choose(new) == KvChoice(None, "kv:0/20 blocks", "override")  # the balancer picks the idle one
    assert choose([Candidate("holder", 0, 7, 20), Candidate("idle", 0, 0, 20)]).label == "holder"


def test_an_overloaded_replica_is_never_chosen_however_much_it_holds() -> None:
    candidates = [Candidate("hot", 12, 100, 100), Candidate("b", 0, 0, 100), Candidate("c", 0, 0, 100)]
    choice = choose(candidates, load_weight=0.0, max_load_factor=1.5, min_load_excess=4)
    assert choice == KvChoice(None, "kv:0/100 blocks", "override")  # the balancer spreads it
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
