"""RedisKeyStore: API-made keys in the Redis every replica shares.

Three keys under one hash tag (``sy:{keys}:...``), so a Redis Cluster keeps them in one slot and one
script changes them together: ``records`` (a hash, name -> record JSON), ``version`` (a counter each
change bumps; replicas poll it) and ``audit`` (a list, newest first, trimmed to its bound). A write
is ``lua/put_key.lua``: the revision check, the record, the version and the audit entry at once.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import msgspec

from gateway.keys.records import AuditEntry, KeyRecord
from gateway.keys.store import WriteConflict
from gateway.redis_client.commands import RespCommands
from gateway.redis_client.deadline import Deadline

__all__ = ["RedisKeyStore"]

_SOURCE = resources.files("gateway.keys").joinpath("lua", "put_key.lua").read_text(encoding="utf-8")
_SHA = hashlib.sha1(_SOURCE.encode()).hexdigest()


class RedisKeyStore:
    """Keys, their version and the audit trail in Redis; every call bounded by ``timeout_s``."""

    def __init__(
        self,
        redis: RespCommands,
        *,
        prefix: str = "sy:",
        timeout_s: float = 1.0,
        max_audit_entries: int = 10_000,
    ) -> None:
        self.redis = redis
        self.timeout_s = timeout_s
        self.max_audit_entries = max_audit_entries
        root = f"{prefix}{{keys}}"
        self._records, self._version, self._audit = f"{root}:records", f"{root}:version", f"{root}:audit"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisKeyStore:
        return cls(RespCommands.from_url(url), **kwargs)

    async def _run(self, *args: Any) -> Any:
        async with Deadline(self.timeout_s):
            return await self.redis.resp.execute(*args)

    async def version(self) -> int:
        return int(await self._run("GET", self._version) or 0)

    async def load(self) -> tuple[int, list[KeyRecord]]:
        version = await self.version()  # read first: records are at least this new
        fields: list[bytes] = await self._run("HVALS", self._records)
        return version, [msgspec.json.decode(value, type=KeyRecord) for value in fields]

    async def put(self, record: KeyRecord, *, read_revision: int, audit: AuditEntry) -> None:
        async with Deadline(self.timeout_s):
            stored = await self.redis.evalsha(
                _SHA,
                _SOURCE,
                [self._records, self._version, self._audit],
                record.name,
                msgspec.json.encode(record),
                read_revision,
                msgspec.json.encode(audit),
                self.max_audit_entries,
            )
        if not stored:
            raise WriteConflict(record.name)

    async def audit(self, limit: int) -> list[AuditEntry]:
        entries: list[bytes] = await self._run("LRANGE", self._audit, 0, max(0, limit - 1))
        return [msgspec.json.decode(entry, type=AuditEntry) for entry in entries]

    async def close(self) -> None:
        await self.redis.close()
