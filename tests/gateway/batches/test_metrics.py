"""The batch runner's line counter, by outcome, on the registry it is given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.batches.metrics import BatchMetrics, Outcome


def test_each_outcome_counts_on_the_gateways_registry() -> None:
    registry = CollectorRegistry()
    metrics = BatchMetrics(registry)
    outcomes: tuple[Outcome, ...] = ("recorded", "recorded", "handed_back", "retried", "already_recorded")
    for outcome in outcomes:
        metrics.count_line(outcome)

    def counted(outcome: str) -> float | None:
        return registry.get_sample_value("sortyard_batch_lines_total", {"outcome": outcome})

    assert (counted("recorded"), counted("handed_back"), counted("retried")) == (2.0, 1.0, 1.0)
    assert counted("already_recorded") == 1.0 and counted("unrecorded") is None
