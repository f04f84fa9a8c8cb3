"""Every Redis call of the caches goes through one guard: bounded in time, never raising.

A cache is an optimisation, so a Redis failure must never fail a request: the guard turns any
failure (refused, reset, timed out, an error reply) into the caller's default (a miss, "not stored")
and reports ``"error"`` to the metric hook.

An outage (no connection, a timeout, or a reply that says Redis cannot serve now: ``LOADING``, a
failover's ``READONLY`` or ``MASTERDOWN``, ``OOM``...) logs one warning (one info line when Redis
answers again) and opens the circuit for ``retry_interval_s``: calls in that time get the default at
once instead of each waiting out a timeout; then the next call tries Redis again. Any other error
reply is about that one call (``WRONGTYPE`` on a key another program wrote, a script's own error):
Redis is up, so only that call gets the default, and each kind of reply is logged once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.redis_client.commands import RespCommands
from gateway.redis_client.deadline import Deadline
from gateway.redis_client.resp import RespError

T = TypeVar("T")
OUTAGE_REPLIES = (
    "LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MISCONF", "OOM",
)  # fmt: skip
"""Error replies that mean Redis cannot serve any call now, as a lost connection does."""
_MAX_LOGGED_KINDS = 32
EventHook = Callable[..., None]
"""``on_event(name: str, n: int = 1)``: the metric hook of every cache (names in the README, Caches)."""

logger = logging.getLogger("sortyard.cache")


def no_events(name: str, n: int = 1) -> None:
    """The default metric hook: counts nothing."""


def connect(url: str, *, timeout_s: float) -> RespCommands:
    """A Redis connection for a cache: a short connect timeout, no retries (the guard decides)."""
    return RespCommands.from_url(url, connect_timeout_s=timeout_s)


class RedisGuard:
    """Runs Redis calls with a time bound and a small circuit breaker (see the module docstring).

    Args:
        timeout_s: the most one call may take, connecting included.
        retry_interval_s: how long after a failure calls skip Redis.
        on_event: the metric hook; gets ``"error"`` for each call that could not use Redis.
        name: names the cache in log lines.
        clock: monotonic seconds (injected for tests).
    """

    def __init__(
        self,
        *,
        timeout_s: float,
        retry_interval_s: float = 1.0,
        on_event: EventHook = no_events,
        name: str = "cache",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.retry_interval_s = retry_interval_s
        self.on_event = on_event
        self.name = name
        self._clock = clock
        self._open_until = 0.0
        self._is_down = False
        self._refusals_logged: set[str] = set()

    @property
    def is_down(self) -> bool:
        """True from a failure until Redis answers again."""
        return self._is_down

    async def run(self, operation: Callable[[], Awaitable[T]], default: T) -> T:
        """``await operation()``, or ``default`` if Redis is down, fails or is too slow."""
        if self._is_down and self._clock() < self._open_until:
            self.on_event("error")
            return default
        try:
            async with Deadline(self.timeout_s):
                result = await operation()
        except RespError as exc:
            if str(exc).startswith(OUTAGE_REPLIES):
                return self._fail(exc, default)
            self._refused(exc)
            return default
        except (OSError, TimeoutError) as exc:  # down, too slow
            return self._fail(exc, default)
        if self._is_down:
            logger.info("%s: Redis answers again", self.name)
            self._is_down = False
        return result

    def _fail(self, exc: Exception, default: T) -> T:
        """An outage: log it once, open the circuit."""
        if not self._is_down:
            logger.warning("%s: Redis unavailable, serving misses until it answers: %r", self.name, exc)
        self._is_down = True
        self._open_until = self._clock() + self.retry_interval_s
        self.on_event("error")
        return default

    def _refused(self, exc: RespError) -> None:
        """An error reply about this call alone: Redis is up; the first of each kind is logged."""
        kind = str(exc).partition(" ")[0]
        if kind not in self._refusals_logged and len(self._refusals_logged) < _MAX_LOGGED_KINDS:
            self._refusals_logged.add(kind)
            logger.warning("%s: Redis refused a call, which gets the default: %r", self.name, exc)
        if self._is_down:
            logger.info("%s: Redis answers again", self.name)
            self._is_down = False
        self.on_event("error")
