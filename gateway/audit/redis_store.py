"""RedisAuditStore: the chain in the Redis every replica shares, never trimmed.

One list, ``sy:{audit}:chain`` (hash-tagged: one Redis Cluster slot), oldest first, so element ``i``
is the entry with ``seq`` ``i``. An append reads the tail, chains the entry to it here (Redis' Lua has
no SHA-256) and runs ``lua/append.lua``, which pushes it only if the list still ends at that tail:
a writer that lost a race reads the new tail and tries again, so concurrent gateways never fork the
chain. Growth: one element (~300 bytes) per admin action, ~3 MB per 10,000 actions.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import msgspec

from gateway.audit.chain import decode_entry
from gateway.audit.entry import Entry, Event, link
from gateway.audit.store import AuditStoreError
from gateway.redis_client.commands import RespCommands
from gateway.redis_client.deadline import Deadline

__all__ = ["RedisAuditStore"]

_SOURCE = resources.files("gateway.audit").joinpath("lua", "append.lua").read_text(encoding="utf-8")
_SHA = hashlib.sha1(_SOURCE.encode()).hexdigest()
_PAGE = 1000


class RedisAuditStore:
    """The chain in Redis; each call bounded by ``timeout_s``, a lost race retried ``max_tries`` times."""

    def __init__(
        self, redis: RespCommands, *, prefix: str = "sy:", timeout_s: float = 1.0, max_tries: int = 100
    ) -> None:
        self.redis = redis
        self.timeout_s = timeout_s
        self.max_tries = max_tries
        self.key = f"{prefix}{{audit}}:chain"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisAuditStore:
        return cls(RespCommands.from_url(url), **kwargs)

    async def _run(self, *args: Any) -> Any:
        async with Deadline(self.timeout_s):
            return await self.redis.resp.execute(*args)

    async def append(self, event: Event) -> Entry:
        for _ in range(self.max_tries):
            last: bytes | None = await self._run("LINDEX", self.key, -1)
            try:
                entry = link(event, decode_entry(last) if last else None)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise AuditStoreError(f"{self.key}: the last element is not an entry") from None
            async with Deadline(self.timeout_s):
                appended = await self.redis.evalsha(
                    _SHA, _SOURCE, [self.key], entry.seq, entry.prev, msgspec.json.encode(entry)
                )
            if appended:
                return entry
        raise AuditStoreError(f"{self.key}: lost the race for the tail {self.max_tries} times")

    async def lines(self) -> list[bytes]:
        found: list[bytes] = []
        while True:  # in pages: one LRANGE of a long chain would hold Redis up
            page: list[bytes] = await self._run("LRANGE", self.key, len(found), len(found) + _PAGE - 1)
            found += page
            if len(page) < _PAGE:
                return found

    async def close(self) -> None:
        await self.redis.close()
