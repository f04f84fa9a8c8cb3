"""The response cache: complete responses by request key, in Redis or in process memory.

A miss costs one GET. A hit on a non-streaming request serves the stored bytes unchanged; a hit on a
streaming request is replayed as SSE (``gateway.cache.replay``). Entries over ``max_entry_bytes`` are
not stored (``"oversize"``); an entry that does not decode (``CorruptEntry``: truncated, bit-flipped,
an older format) is deleted and reported as a miss (``"corrupt"``), never served. A Redis failure is a
miss too (``"error"``, see ``redis_guard``): a cache never fails a request.

Metric events (``on_event(name, n=1)``): ``hit``, ``miss``, ``store``, ``oversize``, ``corrupt``,
``error``, ``evict`` (memory only), ``hit_bytes`` and ``store_bytes`` (n = bytes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.cache.blobs import Blobs, MemoryBlobs, RedisBlobs
from gateway.cache.entry import CorruptEntry, Entry
from gateway.cache.redis_guard import EventHook, no_events
from gateway.redis_client.commands import RespCommands


class ResponseCache:
    """Get, put and delete cache entries on any :class:`~gateway.cache.blobs.Blobs`.

    Args:
        blobs: where the bytes live.
        max_entry_bytes: the default size limit of one stored entry (``put`` may pass the policy's).
        on_event: the metric hook.
    """

    def __init__(
        self, blobs: Blobs, *, max_entry_bytes: int = 1_048_576, on_event: EventHook = no_events
    ) -> None:
        self.blobs = blobs
        self.max_entry_bytes = max_entry_bytes
        self.on_event = on_event

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key``, or None (missing, expired, corrupt, or the store is down)."""
        raw = await self.blobs.get(key)
        if raw is None:
            self.on_event("miss")
            return None
        return await self.accept(key, raw)

    async def accept(self, key: str, raw: bytes) -> Entry | None:
        """Decode bytes read from ``key`` and count the hit; a corrupt entry is deleted, a miss."""
        try:
            entry = Entry.decode(raw)
        except CorruptEntry:
            self.on_event("corrupt")
            self.on_event("miss")
            await self.blobs.delete(key)
            return None
        self.on_event("hit")
        self.on_event("hit_bytes", len(raw))
        return entry

    async def put(self, key: str, entry: Entry, ttl_s: float, *, max_entry_bytes: int | None = None) -> bool:
        """Store ``entry`` for ``ttl_s`` seconds; False when it is too large or the store failed."""
        limit = self.max_entry_bytes if max_entry_bytes is None else max_entry_bytes
        if entry.num_bytes > limit:
            self.on_event("oversize")
            return False
        data = entry.encode()
        stored = await self.blobs.set(key, data, ttl_s)
        if stored:
            self.on_event("store")
            self.on_event("store_bytes", len(data))
        return stored

    async def delete(self, key: str) -> None:
        await self.blobs.delete(key)

    async def close(self) -> None:
        await self.blobs.close()


class RedisResponseCache(ResponseCache):
    """The response cache in Redis, shared by every gateway replica (see ``RedisBlobs`` for arguments)."""

    def __init__(
        self,
        url_or_client: str | RespCommands,
        *,
        timeout_s: float = 0.05,
        max_entry_bytes: int = 1_048_576,
        on_event: EventHook = no_events,
        retry_interval_s: float = 1.0,
    ) -> None:
        blobs = RedisBlobs(
            url_or_client,
            timeout_s=timeout_s,
            on_event=on_event,
            retry_interval_s=retry_interval_s,
            name="response cache",
        )
        super().__init__(blobs, max_entry_bytes=max_entry_bytes, on_event=on_event)


class MemoryResponseCache(ResponseCache):
    """The response cache in this process: an LRU of at most ``max_bytes``, with TTLs."""

    def __init__(
        self,
        max_bytes: int = 64 * 1024 * 1024,
        *,
        max_entry_bytes: int = 1_048_576,
        on_event: EventHook = no_events,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        blobs = MemoryBlobs(max_bytes, on_event=on_event, clock=clock)
        super().__init__(blobs, max_entry_bytes=max_entry_bytes, on_event=on_event)
