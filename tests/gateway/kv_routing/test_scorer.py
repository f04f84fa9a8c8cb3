"""The scorer: tokens held against load, never an overloaded replica, nobody when nobody holds a block."""

from __future__ import annotations

import pytest

from gateway.kv_routing.scorer import Candidate, KvChoice, choose


def test_the_replica_holding_the_most_leading_blocks_wins_at_equal_load() -> None:
    choice = choose([Candidate("a", 1, 2, 10), Candidate("b", 1, 8, 10), Candidate("c", 1, 0, 10)])
    assert choice == KvChoice("b", "kv:8/10 blocks@b", "hit")


def test_load_is_weighed_in_prompt_tokens_held() -> None:
    candidates = [Candidate("a", 3, 10, 10, 16), Candidate("b", 0, 8, 10, 16)]  # 160 tokens against 128
    assert choose(candidates, load_tokens=20).label == "b"  # 128 - 0 beats 160 - 60
    assert choose(candidates, load_tokens=10).label == "a"  # 160 - 30 beats 128
    assert choose(candidates, load_tokens=20).outcome == "override"


def test_tokens_not_blocks_count_where_block_sizes_differ() -> None:
    # vLLM at block size 128 holding 2 blocks holds more of the prompt than an engine at 16 holding 10
    candidates = [Candidate("vllm", 0, 2, 10, 128), Candidate("ours", 0, 10, 80, 16)]
    assert choose(candidates).label == "vllm"


def test_a_long_history_stays_while_a_new_conversation_spreads() -> None:
    # a conversation's next turn: its replica holds its ~1,000-token history (62 blocks of 16), the
    # other replica only its 208-token system prompt (13 blocks)
    next_turn = [Candidate("home", 3, 62, 64), Candidate("idle", 0, 13, 64)]
    assert choose(next_turn).label == "home"  # 992 - 768 beats 208: prefilling it again costs more
    moved = choose([Candidate("home", 4, 62, 64), Candidate("idle", 0, 13, 64)])
    assert moved == KvChoice("idle", "kv:13/64 blocks@idle", "override")  # 992 - 1024 loses to 208
    # a new conversation sharing only the system prompt with a replica one request busier than
    # another: it goes to the other, which then holds that system prompt too
    new = [Candidate("holder", 1, 13, 40), Candidate("idle", 0, 0, 40)]
    assert choose(new) == KvChoice(None, "kv:0/40 blocks", "override")  # the balancer picks the idle one
    assert choose([Candidate("holder", 0, 13, 40), Candidate("idle", 0, 0, 40)]).label == "holder"


def test_no_load_tokens_lets_blocks_alone_decide() -> None:
    assert choose([Candidate("a", 3, 2, 10), Candidate("b", 0, 1, 10)], load_tokens=0).label == "a"


def test_an_overloaded_replica_is_never_chosen_however_much_it_holds() -> None:
    candidates = [Candidate("hot", 12, 100, 100), Candidate("b", 0, 0, 100), Candidate("c", 0, 0, 100)]
    choice = choose(candidates, load_tokens=0, max_load_factor=1.5, min_load_excess=4)
    assert choice == KvChoice(None, "kv:0/100 blocks", "override")  # the balancer spreads it
    # a small excess (a few requests an engine batches anyway) does not count as overloaded
    few = [Candidate("warm", 2, 100, 100), Candidate("b", 0, 0, 100)]
    assert choose(few, load_tokens=0, max_load_factor=1.5, min_load_excess=4).label == "warm"


def test_nobody_holding_a_block_leaves_the_choice_to_the_balancer() -> None:
    choice = choose([Candidate("a", 0, 0, 6), Candidate("b", 2, 0, 6)])
    assert choice == KvChoice(None, "kv:0/6 blocks", "miss")


def test_ties_go_to_the_lighter_then_the_earlier_replica() -> None:
    assert choose([Candidate("a", 1, 5, 5), Candidate("b", 1, 5, 5)], load_tokens=0).label == "a"
    assert choose([Candidate("a", 2, 5, 5), Candidate("b", 1, 5, 5)], load_tokens=0).label == "b"


def test_no_candidates_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        choose([])
