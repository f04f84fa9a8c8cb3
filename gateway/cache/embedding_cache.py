"""The embedding cache: one entry per (tenant, model, options, input), read and written in batches.

A request's inputs are looked up with one ``MGET`` (keys from ``CacheKeys.embeddings``, one hash tag
per tenant); the owner sends only the misses upstream, merges the answer, and stores the new vectors
with one pipelined batch. An entry holds the JSON value of one ``data[i].embedding`` exactly as the
upstream returned it (a list of floats, or a base64 string when ``encoding_format`` was ``base64``,
which is part of the key), in the checksummed envelope of ``gateway.cache.entry``; a corrupt entry is
deleted and counts as a miss.

Metric events: ``hit``, ``miss`` (n = inputs), ``store`` (n = vectors), ``corrupt``, ``error``,
``evict`` (memory only), ``hit_bytes``, ``store_bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gateway.cache.blobs import Blobs, MemoryBlobs, RedisBlobs
from gateway.cache.entry import CorruptEntry, Entry, EntryKind
from gateway.cache.redis_guard import EventHook, no_events
from gateway.redis_client.commands import RespCommands


def embedding_inputs(value: Any) -> list[Any]:
    """The separate inputs of an embeddings request's ``input``: a string, a list of strings, one list
    of token ids, or a list of token-id lists (data[i] of the response answers inputs[i])."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [value]
    return list(value) if isinstance(value, list) else [value]


class EmbeddingCache:
    """Batch get and put of embedding values on any :class:`~gateway.cache.blobs.Blobs`."""

    def __init__(self, blobs: Blobs, *, on_event: EventHook = no_events) -> None:
        self.blobs = blobs
        self.on_event = on_event

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The cached embedding JSON value of each key, or None, in order (one round trip)."""
        raws = await self.blobs.get_many(keys)
        values: list[bytes | None] = []
        corrupt: list[str] = []
        num_bytes = 0
        for key, raw in zip(keys, raws, strict=True):
            if raw is None:
                values.append(None)
                continue
            try:
                entry = Entry.decode(raw)
                if entry.kind != EntryKind.EMBEDDING:
                    raise CorruptEntry(f"entry kind {entry.kind} where an embedding was expected")
            except CorruptEntry:
                corrupt.append(key)
                values.append(None)
                continue
            values.append(entry.body)
            num_bytes += len(raw)
        if corrupt:
            self.on_event("corrupt", len(corrupt))
            await self.blobs.delete(*corrupt)
        num_hits = len(values) - values.count(None)
        if num_hits:
            self.on_event("hit", num_hits)
            self.on_event("hit_bytes", num_bytes)
        if num_hits < len(values):
            self.on_event("miss", len(values) - num_hits)
        return values

    async def put_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> bool:
        """Store ``(key, embedding JSON value)`` pairs for ``ttl_s`` seconds (one round trip)."""
        if not items:
            return True
        encoded = [(key, Entry(EntryKind.EMBEDDING, value).encode()) for key, value in items]
        stored = await self.blobs.set_many(encoded, ttl_s)
        if stored:
            self.on_event("store", len(encoded))
            self.on_event("store_bytes", sum(len(data) for _, data in encoded))
        return stored

    async def close(self) -> None:
        await self.blobs.close()


class RedisEmbeddingCache(EmbeddingCache):
    """The embedding cache in Redis, shared by every gateway replica."""

    def __init__(
        self, url_or_client: str | RespCommands, *, timeout_s: float = 0.05, on_event: EventHook = no_events
    ) -> None:
        blobs = RedisBlobs(url_or_client, timeout_s=timeout_s, on_event=on_event, name="embedding cache")
        super().__init__(blobs, on_event=on_event)


class MemoryEmbeddingCache(EmbeddingCache):
    """The embedding cache in this process, at most ``max_bytes``."""

    def __init__(
        self,
        max_bytes: int = 64 * 1024 * 1024,
        *,
        on_event: EventHook = no_events,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(MemoryBlobs(max_bytes, on_event=on_event, clock=clock), on_event=on_event)
