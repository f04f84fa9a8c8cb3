"""``BatchMetrics``: what a gateway's batch runner did with the lines it claimed, on the gateway's own
registry (``/metrics``): ``sortyard_batch_lines_total{outcome}``.

Outcomes: ``recorded`` (the line's answer is its result, success or error), ``retried`` (a 429 or
503 said wait: handed back to run later), ``handed_back`` (the process stopped with the line in
flight: another gateway, or this one restarted, runs it), ``unrecorded`` (the store failed: the line
runs again once its lease ends), ``already_recorded`` (answered, but another gateway had recorded the
line first: its lease ran out here; the result written first stands). Summed over gateways,
``recorded`` is the batch's line count: a line is recorded once, wherever it ran.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter

__all__ = ["BatchMetrics", "Outcome"]

Outcome = Literal["recorded", "retried", "handed_back", "unrecorded", "already_recorded"]


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.lines = Counter(
            "sortyard_batch_lines",
            "Batch lines this gateway ran, by outcome.",
            ["outcome"],
            registry=registry,
        )

    def count_line(self, outcome: Outcome) -> None:
        self.lines.labels(outcome).inc()
