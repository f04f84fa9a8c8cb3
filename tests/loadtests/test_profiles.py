"""loadtests/profiles.py: the users a steady, ramp or burst test wants at each moment."""

from __future__ import annotations

import itertools

from loadtests.profiles import LoadProfile


def test_steady_holds_then_stops() -> None:
    profile = LoadProfile("steady", num_users=8, run_time_s=30)
    assert [profile.users_at(t) for t in (0, 10, 29.9)] == [8, 8, 8]
    assert profile.users_at(30) is None


def test_ramp_climbs_from_one_user_a_class_and_holds() -> None:
    profile = LoadProfile("ramp", num_users=20, run_time_s=100, min_users=5)
    counts = [profile.users_at(t) for t in range(0, 100, 5)]
    assert counts[0] == 5
    assert all(a is not None and b is not None and a <= b for a, b in itertools.pairwise(counts))
    assert profile.users_at(79) == 19 and profile.users_at(80) == 20 and profile.users_at(99) == 20
    assert profile.users_at(100) is None


def test_burst_alternates_baseline_and_peak() -> None:
    profile = LoadProfile("burst", num_users=16, run_time_s=60, min_users=6)
    assert profile.burst_period_s == 20 and profile.burst_s == 5
    assert profile.baseline_users == 6  # a quarter of 16 is 4, below one user a class
    assert [profile.users_at(t) for t in (0, 14.9, 15, 19.9, 20, 35, 59)] == [6, 6, 16, 16, 6, 16, 16]
    assert profile.users_at(60) is None


def test_burst_period_is_clamped_and_floor_never_exceeds_users() -> None:
    assert LoadProfile("burst", 4, run_time_s=12).burst_period_s == 10
    assert LoadProfile("burst", 4, run_time_s=3600).burst_period_s == 60
    tiny = LoadProfile("ramp", num_users=2, run_time_s=10, min_users=6)
    assert tiny.users_at(0) == 2 and tiny.users_at(9) == 2
    assert LoadProfile("burst", 2, run_time_s=10, min_users=6).baseline_users == 2
