"""The per-replica circuit breaker: closed -> open -> half-open -> closed, on an injected clock."""

from __future__ import annotations

from gateway.replicas.breaker import CLOSED, HALF_OPEN, OPEN, Breaker
from gateway.replicas.config import BreakerConfig


def make(**config: object) -> tuple[Breaker, list[tuple[str, str]]]:
    changes: list[tuple[str, str]] = []
    breaker = Breaker(BreakerConfig(**config), on_change=lambda old, new: changes.append((old, new)))  # type: ignore[arg-type]
    return breaker, changes


def test_opens_after_consecutive_failures_and_a_success_resets_the_count() -> None:
    breaker, changes = make(failure_threshold=3)
    for _ in range(2):
        breaker.record_failure(0.0)
    breaker.record_success(0.0)
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    assert breaker.state == CLOSED and breaker.allows(0.0)
    breaker.record_failure(0.0)
    assert breaker.state == OPEN
    assert not breaker.allows(0.1)
    assert changes == [(CLOSED, OPEN)]
    assert breaker.num_opens == 1


def test_half_open_after_open_s_lets_limited_trials_and_a_success_closes() -> None:
    breaker, changes = make(failure_threshold=1, open_s=10, half_open_max=2)
    breaker.record_failure(100.0)
    assert not breaker.allows(109.9)
    assert not breaker.is_up(109.9)
    assert breaker.allows(110.0)
    assert breaker.state == HALF_OPEN
    breaker.on_pick(110.0)
    assert breaker.allows(110.0)
    breaker.on_pick(110.0)
    assert not breaker.allows(110.1)  # both trial slots taken
    assert breaker.is_up(110.1)  # still counts as up for readiness
    breaker.record_success(111.0)
    assert breaker.state == CLOSED and breaker.allows(111.0)
    assert changes == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


def test_a_failed_trial_reopens_for_another_open_s() -> None:
    breaker, changes = make(failure_threshold=1, open_s=5)
    breaker.record_failure(0.0)
    assert breaker.allows(5.0)
    breaker.on_pick(5.0)
    breaker.record_failure(6.0)
    assert breaker.state == OPEN
    assert not breaker.allows(10.9)
    assert breaker.allows(11.0)
    assert changes == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, OPEN), (OPEN, HALF_OPEN)]


def test_a_trial_that_never_reports_frees_its_slot_after_open_s() -> None:
    breaker, _ = make(failure_threshold=1, open_s=5, half_open_max=1)
    breaker.record_failure(0.0)
    assert breaker.allows(5.0)
    breaker.on_pick(5.0)
    assert not breaker.allows(9.0)
    assert breaker.allows(10.0)


def test_a_straggler_success_while_open_does_not_close() -> None:
    breaker, _ = make(failure_threshold=1, open_s=5)
    breaker.record_failure(0.0)
    breaker.record_success(1.0)
    assert breaker.state == OPEN


def test_failure_rate_over_the_window_opens() -> None:
    breaker, _ = make(failure_threshold=100, failure_rate=0.5, window_s=10, min_requests=10)
    for i in range(10):  # alternate: 50% failures, never two in a row
        (breaker.record_failure if i % 2 else breaker.record_success)(1.0)
    assert breaker.state == OPEN


def test_failure_rate_needs_min_requests_and_the_window_tumbles() -> None:
    breaker, _ = make(failure_threshold=100, failure_rate=0.5, window_s=10, min_requests=10)
    for _ in range(4):
        breaker.record_failure(0.0)
        breaker.record_success(0.0)
    assert breaker.state == CLOSED  # 8 requests < min_requests
    for _ in range(6):
        breaker.record_success(20.0)  # a new window: the old failures are gone
    for _ in range(4):
        breaker.record_failure(20.0)
        breaker.record_success(20.0)
    assert breaker.state == CLOSED  # 4 failures of 14


def test_probe_trip_then_probe_ok_closes_but_request_failures_go_through_trials() -> None:
    breaker, _ = make(failure_threshold=1, open_s=30)
    breaker.trip(0.0)
    assert breaker.state == OPEN and breaker.is_opened_by_probe
    breaker.probe_ok(1.0)
    assert breaker.state == CLOSED and breaker.allows(1.0)

    breaker.record_failure(2.0)  # a request failure (e.g. HTTP 500 while /health is fine)
    breaker.probe_ok(3.0)
    assert breaker.state == HALF_OPEN  # long before open_s: the replica answers again
    assert breaker.allows(3.0)
    breaker.on_pick(3.0)
    assert not breaker.allows(3.0)
    breaker.probe_ok(4.0)
    assert breaker.state == HALF_OPEN  # a probe never closes what requests opened
    breaker.record_failure(5.0)
    assert breaker.state == OPEN and not breaker.allows(6.0)
    breaker.probe_ok(7.0)
    breaker.on_pick(7.0)
    breaker.record_success(7.5)
    assert breaker.state == CLOSED


def test_trip_restarts_the_open_timer() -> None:
    breaker, _ = make(failure_threshold=1, open_s=5)
    breaker.record_failure(0.0)
    breaker.trip(4.0)
    assert not breaker.allows(8.0)
    assert breaker.allows(9.0)
