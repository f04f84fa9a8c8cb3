"""Deadline: a Redis call's time bound that a blocked event loop does not use up.

``asyncio.timeout`` counts wall time. When the loop is blocked past a call's deadline (a long GC pass,
a process starved of CPU or of the GIL), the timer fires when the loop comes back, before the loop
gets to the reply that has waited in the socket meanwhile: a call Redis answered in a millisecond
fails, and behind a ``fail_closed`` store that one stall becomes ``retry_interval_s`` of 503s. So a
deadline whose timer runs late by more than a tenth of the bound (the loop was away, not Redis) moves
once, a whole bound past the moment the loop came back. A Redis that does not answer still ends the
call: on time while the loop keeps up, else within twice the bound plus the stall.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

_LATE_SHARE = 0.1
"""A timer later than this share of the bound means the loop was blocked: the call gets its bound again."""


class Deadline:
    """``async with Deadline(timeout_s):`` cancels the block and raises ``TimeoutError`` once it has run
    ``timeout_s`` (moved once when the loop was blocked past it; see the module docstring)."""

    __slots__ = ("_due", "_is_moved", "_timeout", "_timer", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._timeout = asyncio.timeout(None)
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._is_moved = False

    async def __aenter__(self) -> Deadline:
        await self._timeout.__aenter__()
        self._arm(asyncio.get_running_loop())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        await self._timeout.__aexit__(exc_type, exc, tb)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._due = loop.time() + self.timeout_s
        self._timer = loop.call_at(self._due, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        late_s = loop.time() - self._due
        if late_s > self.timeout_s * _LATE_SHARE and not self._is_moved:
            self._is_moved = True  # once: a loop blocked again and again must not hold a call forever
            self._arm(loop)
        else:
            self._timeout.reschedule(loop.time())  # due now: asyncio cancels the block, TimeoutError
