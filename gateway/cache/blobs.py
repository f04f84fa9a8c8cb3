"""Where cached bytes live: a tiny key -> bytes store with TTLs, in Redis or in process memory.

The response cache, the embedding cache, the prefix-affinity map and the single-flight locks all sit
on this one seam, so every one of them has a memory twin with the same semantics (the contract tests
run each test body over both). Neither implementation raises on a store failure: reads answer
``None`` (a miss), writes answer ``False``.

``RedisBlobs`` does every batch in one round trip (``MGET``; ``SET ... PX`` pipelined) on one
``RespCommands`` connection. Its memory twin ``MemoryBlobs`` is an LRU bounded by bytes; it reports
each entry pushed out to make room as ``"evict"`` (Redis's own ``maxmemory`` evictions are in its
``INFO stats``, not here).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Protocol

from gateway.cache.redis_guard import EventHook, RedisGuard, connect, no_events
from gateway.redis_client.commands import RespCommands

_ENTRY_OVERHEAD_BYTES = 64  # dict slot, tuple and float of one memory entry, roughly


class Blobs(Protocol):
    """A key -> bytes store with per-key TTLs that never raises on a store failure."""

    async def get(self, key: str) -> bytes | None: ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """One value (or None) per key, in order, in one round trip."""
        ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> bool: ...

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> bool:
        """Store every item with one TTL, in one round trip."""
        ...

    async def set_each(self, keys: Sequence[str], value: bytes, ttl_s: float) -> bool:
        """Store one value under every key, with one TTL, in one round trip."""
        ...

    async def delete(self, *keys: str) -> None: ...

    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool | None:
        """Set ``key`` to ``token`` unless it exists: True (ours), False (held), None (store down)."""
        ...

    async def release_lock(self, key: str, token: str) -> None:
        """Delete ``key`` if it still holds ``token``."""
        ...

    async def close(self) -> None: ...


def _ms(ttl_s: float) -> int:
    return max(1, math.ceil(ttl_s * 1000))


class _Script:
    """A Lua file of this package, called by SHA1 (loaded on NOSCRIPT: a fresh or flushed Redis)."""

    def __init__(self, name: str) -> None:
        self.source = resources.files("gateway.cache").joinpath("lua", name).read_text("utf-8")
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def __call__(self, client: RespCommands, keys: Sequence[str], *args: bytes | str | int) -> object:
        return await client.evalsha(self.sha, self.source, keys, *args)


class RedisBlobs:
    """Blobs in Redis (standalone or Cluster: batches must share a hash tag, as the cache keys do).

    Args:
        url_or_client: a ``redis://`` URL, or a ``RespCommands`` connection the caller owns.
        timeout_s: the most one call may take; past it the call counts as a miss.
        on_event: the metric hook (gets ``"error"``).
        retry_interval_s: how long after a failure calls skip Redis.
        name: names the cache in log lines.
    """

    def __init__(
        self,
        url_or_client: str | RespCommands,
        *,
        timeout_s: float = 0.05,
        on_event: EventHook = no_events,
        retry_interval_s: float = 1.0,
        name: str = "cache",
    ) -> None:
        if isinstance(url_or_client, str):
            self.client = connect(url_or_client, timeout_s=timeout_s)
            self._owns_client = True
        else:
            self.client = url_or_client
            self._owns_client = False
        self.guard = RedisGuard(
            timeout_s=timeout_s, retry_interval_s=retry_interval_s, on_event=on_event, name=name
        )
        self._release_lock = _Script("release_lock.lua")
        self._set_each = _Script("set_each.lua")

    async def get(self, key: str) -> bytes | None:
        return await self.guard.run(lambda: self.client.get(key), None)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        values: list[bytes | None] | None = await self.guard.run(lambda: self.client.mget(keys), None)
        return values if values is not None else [None] * len(keys)

    async def set(self, key: str, value: bytes, ttl_s: float) -> bool:
        return await self.guard.run(lambda: self.client.set(key, value, px=_ms(ttl_s)), False)

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> bool:
        if not items:
            return True
        px = _ms(ttl_s)

        async def write() -> bool:
            # set in one loop turn: one write, answered as a pipeline
            await asyncio.gather(*(self.client.set(key, value, px=px) for key, value in items))
            return True

        return await self.guard.run(write, False)

    async def set_each(self, keys: Sequence[str], value: bytes, ttl_s: float) -> bool:
        if not keys:
            return True
        done = await self.guard.run(lambda: self._set_each(self.client, keys, value, _ms(ttl_s)), None)
        return done is not None

    async def delete(self, *keys: str) -> None:
        if keys:
            await self.guard.run(lambda: self.client.delete(*keys), 0)

    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool | None:
        taken: bool | None = await self.guard.run(
            lambda: self.client.set(key, token, nx=True, px=_ms(ttl_s)), None
        )
        return taken

    async def release_lock(self, key: str, token: str) -> None:
        await self.guard.run(lambda: self._release_lock(self.client, [key], token), None)

    async def close(self) -> None:
        if self._owns_client:
            await self.client.close()


class MemoryBlobs:
    """Blobs in this process: an LRU bounded by ``max_bytes`` (keys and values), with TTLs.

    Nothing here awaits, so on one event loop every operation is atomic.

    Args:
        max_bytes: the most the values and keys may take together; the least recently used entries
            are pushed out to make room (``"evict"``), expired ones first-come as they are met.
        on_event: the metric hook.
        clock: monotonic seconds (injected for tests).
    """

    def __init__(
        self,
        max_bytes: int = 64 * 1024 * 1024,
        *,
        on_event: EventHook = no_events,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.on_event = on_event
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.num_bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def _get(self, key: str, now: float) -> bytes | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= now:
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return item[1]

    async def get(self, key: str) -> bytes | None:
        return self._get(key, self._clock())

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        now = self._clock()
        return [self._get(key, now) for key in keys]

    def _set(self, key: str, value: bytes, expires_at: float) -> bool:
        size = len(key) + len(value) + _ENTRY_OVERHEAD_BYTES
        if size > self.max_bytes:
            return False
        self._drop(key)
        while self.num_bytes + size > self.max_bytes:
            oldest, (expires, _) = next(iter(self._items.items()))
            self._drop(oldest)
            if expires > self._clock():
                self.on_event("evict")
        self._items[key] = (expires_at, value)
        self.num_bytes += size
        return True

    async def set(self, key: str, value: bytes, ttl_s: float) -> bool:
        return self._set(key, value, self._clock() + ttl_s)

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> bool:
        expires_at = self._clock() + ttl_s
        stored = [self._set(key, value, expires_at) for key, value in items]
        return all(stored)

    async def set_each(self, keys: Sequence[str], value: bytes, ttl_s: float) -> bool:
        expires_at = self._clock() + ttl_s
        return all([self._set(key, value, expires_at) for key in keys])

    def _drop(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.num_bytes -= len(key) + len(item[1]) + _ENTRY_OVERHEAD_BYTES

    async def delete(self, *keys: str) -> None:
        for key in keys:
            self._drop(key)

    async def acquire_lock(self, key: str, token: str, ttl_s: float) -> bool | None:
        # locks are ordinary entries (as in Redis), so one get_many reads an entry and its lock
        now = self._clock()
        if self._get(key, now) is not None:
            return False
        return self._set(key, token.encode(), now + ttl_s)

    async def release_lock(self, key: str, token: str) -> None:
        if self._get(key, self._clock()) == token.encode():
            self._drop(key)

    async def close(self) -> None:
        self._items.clear()
        self.num_bytes = 0
