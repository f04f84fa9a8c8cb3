"""A replica's recent latency: its last answers' times in a ring, summarised on demand.

The upstream stage reports each successful answer's time to its first byte (a plain response's
whole body; a stream's first event) through ``Balancer.record_success``. ``observe`` writes one slot
of a fixed ring (no allocation, no lock: it runs on the hot path); ``summary`` sorts the samples still
inside the window when someone asks (the console's ``GET /v1/admin/pools``), never per request.
"""

from __future__ import annotations

import math

import msgspec

__all__ = ["LatencySummary", "LatencyWindow"]

NUM_SAMPLES = 128
"""Answers kept per replica; older ones are overwritten."""
WINDOW_S = 300.0
"""Samples older than this do not count as recent."""


class LatencySummary(msgspec.Struct, frozen=True):
    """Recent answers of one replica: how many, and their 50th, 95th percentile and slowest time."""

    num_samples: int
    """Answers inside the window (at most the ring's size)."""
    window_s: float
    p50_ms: float | None = None
    p95_ms: float | None = None
    max_ms: float | None = None
    last_age_s: float | None = None
    """Seconds since the newest sample; None when there is none in the window."""


class LatencyWindow:
    """The last ``size`` latencies of one replica, each with the clock time it was observed at."""

    __slots__ = ("_at", "_next", "_seconds", "size")

    def __init__(self, size: int = NUM_SAMPLES) -> None:
        self.size = size
        self._seconds = [0.0] * size
        self._at = [-math.inf] * size
        self._next = 0

    def observe(self, seconds: float, now: float) -> None:
        """One answer that took ``seconds``, seen at clock time ``now``."""
        i = self._next
        self._seconds[i] = seconds
        self._at[i] = now
        self._next = (i + 1) % self.size

    def summary(self, now: float, window_s: float = WINDOW_S) -> LatencySummary:
        """The samples of the last ``window_s`` seconds (nearest-rank percentiles)."""
        recent = sorted(s for s, at in zip(self._seconds, self._at, strict=True) if now - at <= window_s)
        if not recent:
            return LatencySummary(num_samples=0, window_s=window_s)
        newest = max(self._at)
        return LatencySummary(
            num_samples=len(recent),
            window_s=window_s,
            p50_ms=_ms(_rank(recent, 0.50)),
            p95_ms=_ms(_rank(recent, 0.95)),
            max_ms=_ms(recent[-1]),
            last_age_s=round(max(0.0, now - newest), 3),
        )


def _rank(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)
