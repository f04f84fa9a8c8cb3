"""Where semantic-cache entries live: an append-only log per tenant and pool, plus one body per entry.

Every gateway replica keeps its own vector index and fills it by tailing the shared log: each lookup
first reads what was appended after its cursor, so an entry stored by any replica is seen by every
other one at its next lookup. In Redis the log is a Stream and each body a plain key, all under the
tenant's hash tag (one Cluster slot)::

    sy:{t:<tenant>}:sc:<pool>:log           XADD v <float32 vector> l <literals> e <entry id>
    sy:{t:<tenant>}:sc:<pool>:e:<entry id>  the response entry (gateway.cache.entry), PX ttl
    sy:{t:<tenant>}:sc:<pool>:v:<hash>      a prompt's embedding (gateway.semantic_cache.embedder)

An append is one script (``lua/append.lua``): the body (first, so a reader that sees the log record
finds its body), ``XADD ... MAXLEN = max_entries`` (the oldest go), ``XTRIM MINID`` (records older
than the TTL, measured from the new record's id) and a ``PEXPIRE`` of the log. Stream ids are
``<ms>-<seq>`` of Redis's clock, so a record's age is in its id. ``MemorySemanticLog`` is the
single-process twin with the same semantics. Neither raises on a store failure: reads answer nothing
new, writes answer False (``gateway.cache.redis_guard``).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

from gateway.cache.blobs import MemoryBlobs, RedisBlobs
from gateway.stores.key_names import KeySpace

_APPEND = resources.files("gateway.semantic_cache").joinpath("lua", "append.lua").read_text("utf-8")
_APPEND_SHA = hashlib.sha1(_APPEND.encode()).hexdigest()

StreamId = tuple[int, int]
"""A log record's position: ``(ms, seq)``, ordered like Redis stream ids."""


@dataclass(frozen=True, slots=True)
class Record:
    """One log record: where the entry's body is, its prompt's vector and its literals."""

    position: StreamId
    entry_id: str
    vector: bytes
    """float32, native byte order, unit length."""
    literals: str

    @property
    def created_ms(self) -> int:
        return self.position[0]


def parse_id(raw: bytes | str) -> StreamId:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class LogKeys:
    """The semantic cache's key names (tenant hash-tagged, like the other caches)."""

    def __init__(self, prefix: str = "sy:") -> None:
        self._space = KeySpace(prefix)

    def root(self, tenant: str, pool: str) -> str:
        return f"{self._space.tenant(tenant)}:sc:{_escape(pool)}"

    def log(self, tenant: str, pool: str) -> str:
        return self.root(tenant, pool) + ":log"

    def body(self, tenant: str, pool: str, entry_id: str) -> str:
        return f"{self.root(tenant, pool)}:e:{entry_id}"

    def vector(self, tenant: str, pool: str, digest: str) -> str:
        return f"{self.root(tenant, pool)}:v:{digest}"


class SemanticLog(Protocol):
    """The shared log and bodies of the semantic cache."""

    async def append(
        self, tenant: str, pool: str, record: Record, body: bytes, *, ttl_s: float, max_entries: int
    ) -> bool:
        """Store ``body`` and append ``record`` (its ``position`` is assigned by the log)."""
        ...

    async def read_since(self, tenant: str, pool: str, cursor: StreamId | None, limit: int) -> list[Record]:
        """Up to ``limit`` records after ``cursor`` (None: from the oldest), oldest first."""
        ...

    async def get_body(self, tenant: str, pool: str, entry_id: str) -> bytes | None: ...

    @property
    def is_down(self) -> bool:
        """True while the store does not answer (a missing body then proves nothing)."""
        ...

    async def delete_body(self, tenant: str, pool: str, entry_id: str) -> None: ...

    async def close(self) -> None: ...


MAX_TTL_S = 366 * 86_400.0
"""The longest TTL honoured (the policy allows a year): a longer one would push the TTL trim's
``MINID`` below zero, which Redis rejects."""


def ttl_ms(seconds: float) -> int:
    """``seconds`` in whole milliseconds, at least 1 and at most ``MAX_TTL_S``."""
    return max(1, math.ceil(min(seconds, MAX_TTL_S) * 1000))


class RedisSemanticLog:
    """The log as Redis Streams, on a ``RedisBlobs`` (its connection and its guard).

    Args:
        blobs: the Redis connection and guard to use (closed by :meth:`close`).
    """

    def __init__(self, blobs: RedisBlobs, *, keys: LogKeys | None = None) -> None:
        self.blobs = blobs
        self.keys = keys or LogKeys()

    async def append(
        self, tenant: str, pool: str, record: Record, body: bytes, *, ttl_s: float, max_entries: int
    ) -> bool:
        keys = [self.keys.log(tenant, pool), self.keys.body(tenant, pool, record.entry_id)]
        args = (body, ttl_ms(ttl_s), max_entries, record.vector, record.literals, record.entry_id)
        client = self.blobs.client
        done = await self.blobs.guard.run(lambda: client.evalsha(_APPEND_SHA, _APPEND, keys, *args), None)
        return done is not None

    async def read_since(self, tenant: str, pool: str, cursor: StreamId | None, limit: int) -> list[Record]:
        log = self.keys.log(tenant, pool)
        start = "-" if cursor is None else f"({cursor[0]}-{cursor[1]}"
        execute = self.blobs.client.resp.execute
        reply: Sequence[Sequence[object]] | None = await self.blobs.guard.run(
            lambda: execute("XRANGE", log, start, "+", "COUNT", limit), None
        )
        records = []
        for raw_id, flat in reply or ():
            fields = dict(zip(flat[::2], flat[1::2], strict=True))  # type: ignore[index]
            try:
                records.append(
                    Record(parse_id(raw_id), fields[b"e"].decode(), fields[b"v"], fields[b"l"].decode())  # type: ignore[arg-type]
                )
            except (KeyError, ValueError, UnicodeDecodeError):
                continue  # not ours to read: skipped, never served
        return records

    async def get_body(self, tenant: str, pool: str, entry_id: str) -> bytes | None:
        return await self.blobs.get(self.keys.body(tenant, pool, entry_id))

    @property
    def is_down(self) -> bool:
        return self.blobs.guard.is_down

    async def delete_body(self, tenant: str, pool: str, entry_id: str) -> None:
        await self.blobs.delete(self.keys.body(tenant, pool, entry_id))

    async def close(self) -> None:
        await self.blobs.close()


class MemorySemanticLog:
    """The log in this process (the single-replica default): the same trims, bodies in an LRU.

    Args:
        max_body_bytes: the most the bodies may take together.
        wall_clock: Unix seconds (record positions and expiry).
    """

    def __init__(
        self, max_body_bytes: int = 64 * 1024 * 1024, *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._wall_clock = wall_clock
        self.bodies = MemoryBlobs(max_body_bytes, clock=wall_clock)
        self.keys = LogKeys()
        self._logs: dict[str, list[Record]] = {}
        self._last: StreamId = (0, 0)

    async def append(
        self, tenant: str, pool: str, record: Record, body: bytes, *, ttl_s: float, max_entries: int
    ) -> bool:
        if not await self.bodies.set(self.keys.body(tenant, pool, record.entry_id), body, ttl_s):
            return False
        ms = int(self._wall_clock() * 1000)
        self._last = (ms, 0) if ms > self._last[0] else (self._last[0], self._last[1] + 1)
        log = self._logs.setdefault(self.keys.log(tenant, pool), [])
        log.append(Record(self._last, record.entry_id, record.vector, record.literals))
        oldest_ms = self._last[0] - ttl_ms(ttl_s)  # from the new record's id, as in Redis
        keep_from = max(len(log) - max_entries, 0)
        while keep_from < len(log) and log[keep_from].created_ms < oldest_ms:
            keep_from += 1
        del log[:keep_from]
        return True

    async def read_since(self, tenant: str, pool: str, cursor: StreamId | None, limit: int) -> list[Record]:
        log = self._logs.get(self.keys.log(tenant, pool), [])
        return [r for r in log if cursor is None or r.position > cursor][:limit]

    async def get_body(self, tenant: str, pool: str, entry_id: str) -> bytes | None:
        return await self.bodies.get(self.keys.body(tenant, pool, entry_id))

    @property
    def is_down(self) -> bool:
        return False

    async def delete_body(self, tenant: str, pool: str, entry_id: str) -> None:
        await self.bodies.delete(self.keys.body(tenant, pool, entry_id))

    async def close(self) -> None:
        self._logs.clear()
        await self.bodies.close()
