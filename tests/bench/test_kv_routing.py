"""bench/kv_routing.py's floor (quoted in docs/routing.md): which later turns had their replica to
themselves until their first token (``kv_chat.alone``), and the report line that compares affinity's
median with theirs."""

from __future__ import annotations

from kv_chat import Turn, alone
from kv_routing import report


def turn(conversation: int, number: int, started: float, ttft: float, ended: float, route: str) -> Turn:
    return Turn(conversation, number, started, ttft, ended, 500, 400, route)


def test_only_later_turns_with_their_replica_to_themselves_count() -> None:
    turns = [
        turn(0, 1, 0.0, 3.0, 4.0, "pool; kv:0/30 blocks"),  # a first turn, replica unknown: overlaps all
        turn(0, 2, 5.0, 0.4, 6.0, "pool; kv:30/32 blocks@r0"),  # alone on r0
        turn(1, 2, 5.2, 0.5, 6.5, "pool; kv:20/22 blocks@r1"),  # alone on r1 (r0's turn is elsewhere)
        turn(1, 3, 7.0, 0.9, 8.0, "pool; kv:22/24 blocks@r1"),  # shares r1 with the next one
        turn(2, 5, 7.5, 0.3, 9.0, "pool; kv:40/41 blocks@r1"),
        turn(3, 2, 3.5, 0.2, 4.5, "pool; kv:10/12 blocks@r2"),  # during the unknown replica's first turn
    ]
    assert alone(turns) == {"alone_turns": 2, "alone_ttft_p50_ms": 450}


def test_the_report_bounds_the_gain_a_pick_could_make() -> None:
    common = {"requests": 10, "ttft_p90_ms": 900, "prefix_hit_rate": 0.9, "per_replica": [5, 5]}
    results = [
        {**common, "mode": "affinity", "ttft_p50_ms": 600, "max_over_mean": 1.0, "kv_decisions": {}},
        {
            **common,
            "mode": "kv",
            "ttft_p50_ms": 580,
            "max_over_mean": 1.0,
            "kv_decisions": {"hit": 9},
            "alone_turns": 12,
            "alone_ttft_p50_ms": 480,
        },
    ]
    assert "TTFT p50 480 ms; affinity's p50 is 1.25x that" in report(results)
