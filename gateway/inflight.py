"""The requests a process is still working on, after-response work included.

A request counts from the moment the server takes it until its last finisher has run (settling
tokens, storing a cache entry, recording the prefix map, metrics), which is after the client has
its response. ``wait_idle`` is how a drain (and a test that asserts on that work) waits for it
instead of guessing how long it takes.
"""

from __future__ import annotations

import asyncio


class InFlight:
    """A counter of open requests with a way to wait until there are none."""

    def __init__(self) -> None:
        self.num_open = 0
        self._idle: asyncio.Event | None = None

    def enter(self) -> None:
        self.num_open += 1

    def exit(self) -> None:
        self.num_open -= 1
        if self.num_open == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no request is open (at once when none is)."""
        while self.num_open:
            if self._idle is None or self._idle.is_set():
                self._idle = asyncio.Event()
            await self._idle.wait()
