"""Single flight: N identical concurrent misses make one upstream call.

Two layers, both keyed by the cache key:

1. In this process, the first caller of :meth:`SingleFlight.acquire` becomes the *leader*; callers
   arriving while it is in flight become *followers* and wait (each bounded by its own ``wait_s``)
   for the leader's :meth:`Flight.release`, which hands them the entry directly.
2. Across gateway replicas, the leader also takes a lock next to the entry (``<key>:lock``, ``SET NX
   PX`` with a token). If another replica holds it, this process's leader polls the entry and the
   lock together (one ``MGET``, same hash tag) until the entry appears (answer from it), the lock
   disappears without an entry (the other leader failed or could not store: take the lock and lead),
   or ``wait_s`` runs out (lead anyway, without the lock: a request never waits past its budget).

A leader releases exactly once (``Flight.release`` is idempotent): after storing the entry (so remote
pollers find it when they see the lock gone), or with ``None`` when it has nothing to store, in which
case its local followers fall through to their own upstream calls. The lock's TTL bounds how long a
crashed leader can hold others back. If the store is down, every process leads on its own.

Usage (the owner's cache stage)::

    flight = await single_flight.acquire(key, wait_s=budget_s)
    if flight.entry is not None:        # a leader answered for us
        ...serve flight.entry...
    else:                               # we lead (flight.is_leader) or fell through
        ...call upstream; on finish: await cache.put(key, entry, ttl); await flight.release(entry)
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.cache.cache_keys import CacheKeys
from gateway.cache.entry import Entry
from gateway.cache.redis_guard import EventHook, no_events
from gateway.cache.response_cache import ResponseCache


@dataclass(eq=False)
class Flight:
    """One caller's part in a single flight."""

    key: str
    entry: Entry | None = None
    """Set when another caller's upstream call answered for this one."""
    is_leader: bool = False
    """True when this caller makes the upstream call and must :meth:`release` afterwards."""
    _owner: SingleFlight | None = field(default=None, repr=False)
    _future: asyncio.Future[Entry | None] | None = field(default=None, repr=False)
    _token: str | None = field(default=None, repr=False)

    async def release(self, entry: Entry | None = None) -> None:
        """Hand ``entry`` (or None: nothing to share) to the waiting followers and drop the lock."""
        owner, self._owner = self._owner, None
        if owner is None:
            return  # a follower, or already released
        await owner._release(self, entry)


class SingleFlight:
    """Collapses identical concurrent misses into one upstream call (see the module docstring).

    Args:
        cache: the response cache the leader stores into (its blobs also hold the locks).
        lock_ttl_s: the lock's lifetime: the longest a leader is expected to take.
        poll_s: first and largest pause between polls of a remote leader's entry (it doubles).
        on_event: the metric hook: ``flight_follow`` (answered by a local leader), ``flight_remote``
            (answered by another replica's), ``flight_timeout`` (gave up waiting).
    """

    def __init__(
        self,
        cache: ResponseCache,
        *,
        lock_ttl_s: float = 60.0,
        poll_s: tuple[float, float] = (0.002, 0.05),
        on_event: EventHook = no_events,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = cache
        self.lock_ttl_s = lock_ttl_s
        self.poll_s = poll_s
        self.on_event = on_event
        self._clock = clock
        # key -> (the leader's future, when its lead ends at the latest: a leader that never
        # releases, through a bug, holds its local followers back no longer than the lock's TTL)
        self._in_flight: dict[str, tuple[asyncio.Future[Entry | None], float]] = {}

    @property
    def num_in_flight(self) -> int:
        return len(self._in_flight)

    async def acquire(self, key: str, *, wait_s: float, lock_ttl_s: float | None = None) -> Flight:
        """Join the flight of ``key``: lead it, or wait up to ``wait_s`` for its leader's entry."""
        lock_ttl_s = lock_ttl_s or self.lock_ttl_s
        known = self._in_flight.get(key)
        future = known[0] if known is not None and known[1] > self._clock() else None
        if future is not None:  # a local leader is in flight: follow it
            try:
                entry = await asyncio.wait_for(asyncio.shield(future), wait_s)
            except TimeoutError:
                self.on_event("flight_timeout")
                return Flight(key)
            if entry is not None:
                self.on_event("flight_follow")
            return Flight(key, entry)
        future = asyncio.get_running_loop().create_future()
        self._in_flight[key] = (future, self._clock() + lock_ttl_s)
        try:
            return await self._lead_or_poll(key, future, self._clock() + wait_s, lock_ttl_s)
        except BaseException:
            self._resolve(key, future, None)
            raise

    async def _lead_or_poll(
        self, key: str, future: asyncio.Future[Entry | None], deadline: float, lock_ttl_s: float
    ) -> Flight:
        lock_key = CacheKeys.lock(key)
        token = os.urandom(12).hex()
        blobs = self.cache.blobs
        pause_s = self.poll_s[0]
        while True:
            held = await blobs.acquire_lock(lock_key, token, lock_ttl_s)
            if held is not False:  # ours, or the store is down: lead
                return Flight(
                    key, is_leader=True, _owner=self, _future=future, _token=token if held else None
                )
            while True:  # another replica leads: watch its entry and its lock in one round trip
                if self._clock() >= deadline:
                    self.on_event("flight_timeout")
                    return Flight(key, is_leader=True, _owner=self, _future=future)
                await asyncio.sleep(min(pause_s, max(0.0, deadline - self._clock())))
                pause_s = min(pause_s * 2, self.poll_s[1])
                raw, lock = await blobs.get_many([key, lock_key])
                if raw is not None:
                    entry = await self.cache.accept(key, raw)
                    if entry is not None:
                        self.on_event("flight_remote")
                        self._resolve(key, future, entry)
                        return Flight(key, entry)
                if lock is None:
                    break  # the other leader is gone without an entry: try to lead

    async def _release(self, flight: Flight, entry: Entry | None) -> None:
        assert flight._future is not None
        self._resolve(flight.key, flight._future, entry)
        if flight._token is not None:
            await self.cache.blobs.release_lock(CacheKeys.lock(flight.key), flight._token)

    def _resolve(self, key: str, future: asyncio.Future[Entry | None], entry: Entry | None) -> None:
        known = self._in_flight.get(key)
        if known is not None and known[0] is future:
            del self._in_flight[key]
        if not future.done():
            future.set_result(entry)

    async def load(
        self,
        key: str,
        produce: Callable[[], Awaitable[Entry | None]],
        *,
        ttl_s: float,
        wait_s: float,
        max_entry_bytes: int | None = None,
    ) -> tuple[Entry | None, str]:
        """Get-or-produce for one complete response: ``(entry, how)``, ``how`` in ``hit``, ``wait``
        (a leader answered) and ``produced`` (this call ran ``produce``). A ``produce`` that raises
        releases its followers (they fall through) and the error propagates to this caller only."""
        entry = await self.cache.get(key)
        if entry is not None:
            return entry, "hit"
        flight = await self.acquire(key, wait_s=wait_s)
        if flight.entry is not None:
            return flight.entry, "wait"
        produced: Entry | None = None
        try:
            produced = await produce()
            if produced is not None:
                await self.cache.put(key, produced, ttl_s, max_entry_bytes=max_entry_bytes)
        finally:
            await flight.release(produced)
        return produced, "produced"
