"""The prefix-affinity map: prefix chain hash -> the replica that last served it, shared through Redis.

One key per chain hash, hash-tagged per tenant (``sy:{t:<tenant>}:pa:<pool>:<hash>``), so a lookup is
one ``MGET`` over the whole chain (one round trip, one Cluster slot) and a record is one ``EVALSHA``
setting every key (``lua/set_each.lua``; a third of a SET pipeline's client cost). The longest match
is the highest chain position with a value: each hash names its whole prefix, so position ``i``
recorded means chunks ``0..i`` matched. Every gateway
replica sees the same map; entries expire ``ttl_s`` after they were last recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.cache.blobs import Blobs, MemoryBlobs, RedisBlobs
from gateway.cache.cache_keys import CacheKeys
from gateway.cache.redis_guard import EventHook, no_events
from gateway.redis_client.commands import RespCommands


class AffinityMap(Protocol):
    """Where prefix -> replica mappings live."""

    async def lookup(self, tenant: str, pool: str, chain_hashes: Sequence[str]) -> tuple[str | None, int]:
        """``(replica label, number of matched chunks)`` of the longest recorded prefix, or ``(None, 0)``."""
        ...

    async def record(
        self, tenant: str, pool: str, chain_hashes: Sequence[str], replica_label: str, ttl_s: float
    ) -> None:
        """Map every prefix of the chain to ``replica_label`` for ``ttl_s`` seconds."""
        ...

    async def close(self) -> None: ...


class BlobAffinityMap:
    """The affinity map on any :class:`~gateway.cache.blobs.Blobs`."""

    def __init__(self, blobs: Blobs, *, keys: CacheKeys | None = None) -> None:
        self.blobs = blobs
        self.keys = keys or CacheKeys()

    async def lookup(self, tenant: str, pool: str, chain_hashes: Sequence[str]) -> tuple[str | None, int]:
        if not chain_hashes:
            return None, 0
        values = await self.blobs.get_many(self.keys.affinity(tenant, pool, chain_hashes))
        for position in range(len(values) - 1, -1, -1):
            value = values[position]
            if value is not None:
                try:
                    return value.decode(), position + 1
                except UnicodeDecodeError:  # not ours: ignore it, as a miss
                    continue
        return None, 0

    async def record(
        self, tenant: str, pool: str, chain_hashes: Sequence[str], replica_label: str, ttl_s: float
    ) -> None:
        if not chain_hashes:
            return
        keys = self.keys.affinity(tenant, pool, chain_hashes)
        await self.blobs.set_each(keys, replica_label.encode(), ttl_s)

    async def close(self) -> None:
        await self.blobs.close()


class RedisAffinityMap(BlobAffinityMap):
    """The affinity map in Redis, shared by every gateway replica."""

    def __init__(
        self,
        url_or_client: str | RespCommands,
        *,
        timeout_s: float = 0.05,
        on_event: EventHook = no_events,
        keys: CacheKeys | None = None,
    ) -> None:
        blobs = RedisBlobs(url_or_client, timeout_s=timeout_s, on_event=on_event, name="affinity map")
        super().__init__(blobs, keys=keys)


class MemoryAffinityMap(BlobAffinityMap):
    """The affinity map in this process (a single gateway replica), at most ``max_bytes``."""

    def __init__(
        self,
        max_bytes: int = 16 * 1024 * 1024,
        *,
        on_event: EventHook = no_events,
        clock: Callable[[], float] = time.monotonic,
        keys: CacheKeys | None = None,
    ) -> None:
        super().__init__(MemoryBlobs(max_bytes, on_event=on_event, clock=clock), keys=keys)
