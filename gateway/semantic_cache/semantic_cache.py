"""The semantic cache: the nearest answered prompt of a tenant and pool, when it is close enough.

Each (tenant, pool) has a shard in this process: a :class:`VectorIndex` and the records it holds,
mirrored from the shared :class:`SemanticLog`. A lookup first pulls the records appended since its
cursor (one ``XRANGE``; usually empty), drops what is past its TTL or beyond ``max_entries`` (the
same trims the log applies, so every replica's mirror converges on the log), then searches the index.
Consistency: an entry any replica stores is visible to every replica at its next lookup; two
replicas never disagree for longer than one lookup, and the body's own TTL in the store bounds
what can be served even from a stale mirror.

A candidate is served when its similarity reaches the threshold and its literals match the prompt's
(``gateway.semantic_cache.canonical.literals_match``: the same scope, which is the context and the
request's parameters, and the same numbers, names, negations and units). The nearest candidates
are checked first; while all of them reach the threshold, the search widens (up to
``MAX_CANDIDATES``), so entries of other scopes at the same similarity (the same question under
other system prompts) cannot crowd out the one that matches. A scope the shard holds no record of is
a miss without a search. The body is read from the store; a body that expired or does not decode is
dropped, never served. The tenant is part of every shard and every key: no lookup ever sees another
tenant's entries.

Metric events (``on_event(name, n=1)``): ``hit``, ``miss``, ``store``, ``oversize``, ``corrupt``.
"""

from __future__ import annotations

import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from gateway.cache.entry import CorruptEntry, Entry
from gateway.cache.redis_guard import EventHook, no_events
from gateway.semantic_cache.canonical import literals_match, scope_of
from gateway.semantic_cache.index import Vector, VectorIndex, normalised
from gateway.semantic_cache.log import Record, SemanticLog, StreamId
from gateway.semantic_cache.log import ttl_ms as _ms

PULL_LIMIT = 512
"""Records read per round trip when a mirror catches up."""
MAX_PULLS = 8
"""Round trips one lookup may spend catching up; the rest waits for the next lookup."""
NUM_CANDIDATES = 8
"""Nearest neighbours checked first for matching literals."""
MAX_CANDIDATES = 256
"""The most neighbours one lookup checks (the search widens fourfold while all reach the threshold)."""


@dataclass(frozen=True, slots=True)
class Hit:
    """A cached answer and how close its prompt was."""

    entry: Entry
    similarity: float


@dataclass(eq=False)
class _Shard:
    index: VectorIndex | None = None
    records: OrderedDict[int, Record] = field(default_factory=OrderedDict)
    """Label -> record, oldest first (the log's order)."""
    cursor: StreamId | None = None
    next_label: int = 0
    scopes: Counter[str] = field(default_factory=Counter)
    """Records held per scope."""


class SemanticCache:
    """Lookups and stores over a shared log (see the module docstring).

    Args:
        log: the shared log (Redis, or this process).
        on_event: the metric hook.
        wall_clock: Unix seconds (expiry is judged by the records' ids, which are wall-clock ms).
    """

    def __init__(
        self,
        log: SemanticLog,
        *,
        on_event: EventHook = no_events,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.log = log
        self.on_event = on_event
        self._wall_clock = wall_clock
        self._shards: dict[tuple[str, str], _Shard] = {}

    def num_entries(self, tenant: str, pool: str) -> int:
        """The records this replica's mirror of (tenant, pool) holds."""
        shard = self._shards.get((tenant, pool))
        return 0 if shard is None else len(shard.records)

    async def lookup(
        self,
        tenant: str,
        pool: str,
        vector: Vector,
        literals: str,
        *,
        threshold: float,
        ttl_s: float,
        max_entries: int,
        match_literals: bool = True,
    ) -> Hit | None:
        """The best entry at least ``threshold`` similar whose literals match (the scope only,
        without ``match_literals``)."""
        shard = self._shards.setdefault((tenant, pool), _Shard())
        query = normalised(vector)
        await self._pull(tenant, pool, shard, ttl_s, max_entries)
        index = shard.index
        if index is None or index.ndim != query.shape[0] or not shard.scopes[scope_of(literals)]:
            self.on_event("miss")
            return None
        checked: set[int] = set()
        k = NUM_CANDIDATES
        while True:
            found = index.search(query, k)
            for label, similarity in found:
                if similarity < threshold:
                    break  # most similar first
                if label in checked:
                    continue
                checked.add(label)
                record = shard.records.get(label)  # a concurrent lookup may have dropped it
                if record is None or not literals_match(record.literals, literals, exact=match_literals):
                    continue
                entry = await self._body(tenant, pool, shard, label, record)
                if entry is not None:
                    self.on_event("hit")
                    return Hit(entry, min(similarity, 1.0))
            if len(found) < k or k >= MAX_CANDIDATES or found[-1][1] < threshold:
                break
            k *= 4
        self.on_event("miss")
        return None

    async def store(
        self,
        tenant: str,
        pool: str,
        vector: Vector,
        literals: str,
        entry: Entry,
        *,
        ttl_s: float,
        max_entries: int,
        max_entry_bytes: int,
    ) -> bool:
        """Append ``entry`` under ``vector``; every replica's next lookup sees it."""
        if entry.num_bytes > max_entry_bytes:
            self.on_event("oversize")
            return False
        record = Record((0, 0), os.urandom(12).hex(), normalised(vector).tobytes(), literals)
        stored = await self.log.append(
            tenant, pool, record, entry.encode(), ttl_s=ttl_s, max_entries=max_entries
        )
        if stored:
            self.on_event("store")
        return stored

    async def _pull(self, tenant: str, pool: str, shard: _Shard, ttl_s: float, max_entries: int) -> None:
        for _ in range(MAX_PULLS):
            records = await self.log.read_since(tenant, pool, shard.cursor, PULL_LIMIT)
            # a concurrent lookup of this shard may have added some already
            fresh = [r for r in records if shard.cursor is None or r.position > shard.cursor]
            if fresh:
                shard.cursor = fresh[-1].position
                self._add(shard, fresh)
            if len(records) < PULL_LIMIT:
                break
        oldest_ms = int(self._wall_clock() * 1000) - _ms(ttl_s)
        while shard.records:
            label, record = next(iter(shard.records.items()))
            if len(shard.records) <= max_entries and record.created_ms >= oldest_ms:
                break
            self._drop(shard, label)

    def _add(self, shard: _Shard, records: list[Record]) -> None:
        labels: list[int] = []
        vectors: list[Vector] = []
        for record in records:
            vector = np.frombuffer(record.vector, dtype=np.float32)
            if shard.index is None or shard.index.ndim != vector.shape[0]:
                if shard.index is not None:  # the embedding model changed: start over with the new one
                    labels, vectors = [], []
                    shard.records.clear()
                    shard.scopes.clear()
                shard.index = VectorIndex(vector.shape[0])
            label = shard.next_label
            shard.next_label += 1
            labels.append(label)
            vectors.append(vector)
            shard.records[label] = replace(record, vector=b"")  # usearch holds the vector
            shard.scopes[scope_of(record.literals)] += 1
        if shard.index is not None:
            shard.index.add_many(labels, vectors)

    def _drop(self, shard: _Shard, label: int) -> None:
        record = shard.records.pop(label, None)
        if record is not None:
            scope = scope_of(record.literals)
            shard.scopes[scope] -= 1
            if shard.scopes[scope] <= 0:
                del shard.scopes[scope]
        if shard.index is not None:
            shard.index.remove(label)

    async def _body(self, tenant: str, pool: str, shard: _Shard, label: int, record: Record) -> Entry | None:
        raw = await self.log.get_body(tenant, pool, record.entry_id)
        if raw is None:
            if not self.log.is_down:  # expired or evicted in the store: gone for every replica
                self._drop(shard, label)
            return None
        try:
            return Entry.decode(raw)
        except CorruptEntry:
            self.on_event("corrupt")
            self._drop(shard, label)
            await self.log.delete_body(tenant, pool, record.entry_id)
            return None

    async def close(self) -> None:
        self._shards.clear()
        await self.log.close()
