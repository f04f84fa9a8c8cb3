"""A circuit breaker per replica: closed -> open -> half-open -> closed.

- **closed**: traffic flows. ``failure_threshold`` failures in a row (connects refused or timed
  out, resets, 5xx, malformed answers), or a failure share above ``failure_rate`` over a
  ``window_s`` tumbling window, open it. A timeout of a request the replica accepted is no failure
  (a long generation is slow, not broken; a hung replica fails its probes), nor is its own 4xx.
- **open**: no traffic for ``open_s``; then it turns half-open on the next look (lazily: no timer).
- **half-open**: up to ``half_open_max`` trial requests in flight; the first success closes it, a
  failure reopens it for another ``open_s``. A trial that never reports (a client went away)
  frees its slot after ``open_s``, so a breaker cannot stay stuck half-open.

Active probes (``gateway.replicas.health``) act on the same breaker: failed probes force it open
(``trip(by_probe=True)``), and a good probe (``probe_ok``) closes a breaker that probes opened (the
replica was unreachable and answers again). A breaker that request failures opened only turns
half-open on a good probe, without waiting out ``open_s``: its trial requests decide, since a
replica can answer ``/health`` and still fail completions.

The clock is injected (``now`` arguments); nothing here sleeps, awaits or locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gateway.replicas.config import BreakerConfig

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "Breaker", "StateListener"]

CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half_open"

StateListener = Callable[[str, str], None]
"""Called with ``(old_state, new_state)`` on every transition."""


class Breaker:
    """One replica's breaker; ``allows(now)`` is the hot-path question."""

    __slots__ = (
        "config",
        "consecutive_failures",
        "is_opened_by_probe",
        "num_opens",
        "num_trials",
        "on_change",
        "opened_at",
        "state",
        "trials_since",
        "window_failures",
        "window_requests",
        "window_start",
    )

    def __init__(
        self, config: BreakerConfig | None = None, *, on_change: StateListener | None = None
    ) -> None:
        self.config = config or BreakerConfig()
        self.on_change = on_change
        self.state: str = CLOSED
        self.consecutive_failures = 0
        self.opened_at = 0.0
        self.is_opened_by_probe = False
        self.num_trials = 0
        self.trials_since = 0.0
        self.window_start = 0.0
        self.window_requests = 0
        self.window_failures = 0
        self.num_opens = 0

    # -- the hot path

    def allows(self, now: float) -> bool:
        """May a request go to this replica now? (Turns open into half-open once ``open_s`` passed.)"""
        state = self.state
        if state == CLOSED:
            return True
        if state == OPEN:
            if now - self.opened_at < self.config.open_s:
                return False
            self._become(HALF_OPEN)
            self.num_trials = 0
            self.trials_since = now
        if self.num_trials < self.config.half_open_max:
            return True
        if now - self.trials_since >= self.config.open_s:  # trials that never reported
            self.num_trials = 0
            self.trials_since = now
            return True
        return False

    def is_up(self, now: float) -> bool:
        """Not open (half-open counts as up: it takes trial requests)."""
        if self.state == OPEN and now - self.opened_at >= self.config.open_s:
            self.allows(now)
        return self.state != OPEN

    def on_pick(self, now: float) -> None:
        """The balancer chose this replica: while half-open, that takes a trial slot."""
        if self.state == HALF_OPEN:
            if self.num_trials == 0:
                self.trials_since = now
            self.num_trials += 1

    # -- outcomes

    def record_success(self, now: float) -> None:
        self.consecutive_failures = 0
        if self.state == CLOSED:
            self._count(now, failed=False)
        elif self.state == HALF_OPEN:
            self._close()
        # open: a straggler sent before the breaker opened proves little; the trials decide

    def record_failure(self, now: float) -> None:
        self.consecutive_failures += 1
        if self.state == HALF_OPEN:
            self._open(now, by_probe=False)
        elif self.state == CLOSED:
            self._count(now, failed=True)
            if self.consecutive_failures >= self.config.failure_threshold or self._rate_exceeded():
                self._open(now, by_probe=False)

    def trip(self, now: float, *, by_probe: bool = True) -> None:
        """Force the breaker open (a failed active probe): restarts the ``open_s`` timer."""
        self._open(now, by_probe=by_probe)

    def probe_ok(self, now: float) -> None:
        """A good active probe: closes a breaker that probes opened; one that request failures
        opened turns half-open at once (the replica answers again), and its trial requests decide."""
        if self.state == CLOSED:
            return
        if self.is_opened_by_probe:
            self._close()
        elif self.state == OPEN:
            self._become(HALF_OPEN)
            self.num_trials = 0
            self.trials_since = now

    # -- internals

    def _count(self, now: float, *, failed: bool) -> None:
        if self.config.failure_rate is None:
            return
        if now - self.window_start >= self.config.window_s:
            self.window_start, self.window_requests, self.window_failures = now, 0, 0
        self.window_requests += 1
        self.window_failures += failed

    def _rate_exceeded(self) -> bool:
        rate = self.config.failure_rate
        return (
            rate is not None
            and self.window_requests >= self.config.min_requests
            and self.window_failures >= rate * self.window_requests
        )

    def _open(self, now: float, *, by_probe: bool) -> None:
        self.opened_at = now
        self.is_opened_by_probe = by_probe
        self.num_trials = 0
        if self.state != OPEN:
            self.num_opens += 1
            self._become(OPEN)

    def _close(self) -> None:
        self.consecutive_failures = 0
        self.num_trials = 0
        self.is_opened_by_probe = False
        self.window_requests = self.window_failures = 0
        self._become(CLOSED)

    def _become(self, state: str) -> None:
        old, self.state = self.state, state
        if self.on_change is not None and old != state:
            self.on_change(old, state)
