"""gateway/replicas/latency.py: a replica's recent latency, and the balancer feeding it."""

from __future__ import annotations

from gateway.policy import parse_policy
from gateway.replicas.balancer import Balancer
from gateway.replicas.latency import LatencyWindow


def test_an_empty_window_has_no_figures() -> None:
    summary = LatencyWindow().summary(now=10.0)
    assert summary.num_samples == 0
    assert summary.p50_ms is None and summary.p95_ms is None and summary.max_ms is None
    assert summary.last_age_s is None


def test_percentiles_are_nearest_rank_in_milliseconds() -> None:
    window = LatencyWindow()
    for i in range(1, 101):  # 1 ms .. 100 ms
        window.observe(i / 1000.0, now=50.0)
    summary = window.summary(now=52.5)
    assert summary.num_samples == 100
    assert (summary.p50_ms, summary.p95_ms, summary.max_ms) == (50.0, 95.0, 100.0)
    assert summary.last_age_s == 2.5


def test_the_ring_keeps_the_newest_samples_only() -> None:
    window = LatencyWindow(size=4)
    for seconds in (9.0, 9.0, 0.001, 0.002, 0.003, 0.004):
        window.observe(seconds, now=0.0)
    summary = window.summary(now=0.0)
    assert summary.num_samples == 4
    assert summary.max_ms == 4.0  # the two slow ones were overwritten


def test_samples_older_than_the_window_do_not_count() -> None:
    window = LatencyWindow()
    window.observe(5.0, now=0.0)
    window.observe(0.010, now=100.0)
    summary = window.summary(now=120.0, window_s=60.0)
    assert summary.num_samples == 1 and summary.max_ms == 10.0
    assert window.summary(now=1000.0, window_s=60.0).num_samples == 0


def test_the_balancer_records_the_latency_of_good_answers() -> None:
    now = [1000.0]
    balancer = Balancer(clock=lambda: now[0])
    balancer.update(
        parse_policy({"pools": {"p": {"replicas": [{"base_url": "http://a/v1", "model": "m"}]}}}, "t")
    )
    (state,) = balancer.replicas("p")
    balancer.record_success(state, 0.020)
    balancer.record_success(state)  # no time known (a caller that measures none): counted, not sampled
    balancer.record_failure(state)
    summary = state.latency.summary(now[0])
    assert (state.num_successes, state.num_failures) == (2, 1)
    assert summary.num_samples == 1 and summary.p50_ms == 20.0
