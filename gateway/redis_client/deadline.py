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
    ``timeout_s`` (moved once when the loop was blocked past it; see the module docstring).

    The task-cancelling part is ``asyncio.timeout``'s (cancel, then ``uncancel`` on the way out so an
    outer cancellation is never swallowed), kept to what a Redis call needs: on the hot path it costs
    less than ``asyncio.timeout`` itself (no state machine, no reschedule)."""

    __slots__ = ("_cancelling", "_due", "_handle", "_is_expired", "_is_moved", "_task", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._is_moved = False
        self._is_expired = False

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        loop = task.get_loop()
        self._due = loop.time() + self.timeout_s
        self._handle = loop.call_at(self._due, self._expire)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._handle.cancel()
        # ours was the cancellation (no outer one pending): it ends as a TimeoutError
        if (
            self._is_expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def _expire(self) -> None:
        loop = self._task.get_loop()
        now = loop.time()
        if now - self._due > self.timeout_s * _LATE_SHARE and not self._is_moved:
            self._is_moved = True  # once: a loop blocked again and again must not hold a call forever
            self._due = now + self.timeout_s
            self._handle = loop.call_at(self._due, self._expire)
            return
        self._is_expired = True
        self._task.cancel()
