"""RedisBatchState: batches, their lines, claims and results, and file metadata in the Redis every
gateway shares, so several gateways run one batch's lines between them, each line once.

Keys (hash-tagged so a Redis Cluster keeps what one script touches in one slot)::

    sy:{b:<batch>}:meta      hash: the doc, status, counts, next line, timestamps, output files
    sy:{b:<batch>}:lines     list: the encoded lines, in input order
    sy:{b:<batch>}:claims    zset: claimed lines without a result -> lease end (ms)
    sy:{b:<batch>}:results   hash: line -> its result, written once
    sy:{t:<tenant>}:files    hash: file id -> its metadata
    sy:{t:<tenant>}:batches  zset: the tenant's batches in the order they were made (``batch_seq``)
    sy:{batches}:active      set: batches not over yet

Claiming, recording, cancelling and finalizing are one Lua script each (``lua/*.lua``).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import msgspec

from gateway.batches.records import BatchDoc, FileObject, StoredBatch
from gateway.redis_client.commands import RespCommands
from gateway.redis_client.deadline import Deadline

__all__ = ["RedisBatchState"]

_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


class _Script:
    def __init__(self, name: str) -> None:
        self.source = resources.files("gateway.batches").joinpath("lua", f"{name}.lua").read_text("utf-8")
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()


_CLAIM, _RECORD, _CANCEL = _Script("claim"), _Script("record"), _Script("cancel")
_BEGIN, _FINISH = _Script("begin_finalizing"), _Script("finish")


def _text(value: bytes | None) -> str | None:
    return value.decode() if value else None


class RedisBatchState:
    """``BatchState`` in Redis; every call bounded by ``timeout_s``."""

    def __init__(self, redis: RespCommands, *, prefix: str = "sy:", timeout_s: float = 2.0) -> None:
        self.redis = redis
        self.prefix = prefix
        self.timeout_s = timeout_s
        self._active = f"{prefix}{{batches}}:active"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisBatchState:
        return cls(RespCommands.from_url(url), **kwargs)

    def _keys(self, batch_id: str) -> tuple[str, str, str, str]:
        root = f"{self.prefix}{{b:{batch_id}}}"
        return f"{root}:meta", f"{root}:claims", f"{root}:results", f"{root}:lines"

    def _tenant(self, tenant: str, what: str) -> str:
        return f"{self.prefix}{{t:{tenant}}}:{what}"

    async def _run(self, *args: Any) -> Any:
        async with Deadline(self.timeout_s):
            return await self.redis.resp.execute(*args)

    async def _script(self, script: _Script, keys: tuple[str, ...], *args: Any) -> Any:
        async with Deadline(self.timeout_s):
            return await self.redis.evalsha(script.sha, script.source, keys, *args)

    async def put_file(self, tenant: str, file: FileObject) -> None:
        await self._run("HSET", self._tenant(tenant, "files"), file.id, msgspec.json.encode(file))

    async def get_file(self, tenant: str, file_id: str) -> FileObject | None:
        found = await self._run("HGET", self._tenant(tenant, "files"), file_id)
        return msgspec.json.decode(found, type=FileObject) if found else None

    async def list_files(self, tenant: str) -> list[FileObject]:
        values: list[bytes] = await self._run("HVALS", self._tenant(tenant, "files"))
        files = [msgspec.json.decode(value, type=FileObject) for value in values]
        return sorted(files, key=lambda f: (f.created_at, f.id), reverse=True)

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        return bool(await self._run("HDEL", self._tenant(tenant, "files"), file_id))

    async def create(self, batch: StoredBatch, lines: list[bytes]) -> None:
        meta, _, _, lines_key = self._keys(batch.doc.id)
        doc = batch.doc
        for start in range(0, len(lines), 1000):  # bounded commands, however long the file
            await self._run("RPUSH", lines_key, *lines[start : start + 1000])
        fields = ["doc", msgspec.json.encode(doc), "status", batch.status, "total", batch.total]
        await self._run("HSET", meta, *fields, "completed", 0, "failed", 0, "next", 0)
        order = await self._run(
            "INCR", self._tenant(doc.tenant, "batch_seq")
        )  # newest first, even in one second
        await self._run("ZADD", self._tenant(doc.tenant, "batches"), order, doc.id)
        await self._run("SADD", self._active, doc.id)

    async def get(self, batch_id: str) -> StoredBatch | None:
        flat: list[bytes] = await self._run("HGETALL", self._keys(batch_id)[0])
        if not flat:
            return None
        fields = dict(zip((k.decode() for k in flat[::2]), flat[1::2], strict=True))
        return StoredBatch(
            doc=msgspec.json.decode(fields["doc"], type=BatchDoc),
            status=fields["status"].decode(),  # type: ignore[arg-type]  # the scripts write only statuses
            total=int(fields["total"]),
            completed=int(fields["completed"]),
            failed=int(fields["failed"]),
            times={name: int(fields[name]) for name in _TIMES if name in fields},
            output_file_id=_text(fields.get("output_file_id")),
            error_file_id=_text(fields.get("error_file_id")),
        )

    async def list_batches(self, tenant: str) -> list[StoredBatch]:
        ids: list[bytes] = await self._run("ZREVRANGE", self._tenant(tenant, "batches"), 0, -1)
        found = [await self.get(batch_id.decode()) for batch_id in ids]
        return [batch for batch in found if batch is not None]

    async def active(self) -> list[str]:
        members: list[bytes] = await self._run("SMEMBERS", self._active)
        return sorted(member.decode() for member in members)

    async def forget(self, batch_id: str) -> None:
        await self._run("SREM", self._active, batch_id)

    async def claim(self, batch_id: str, now_s: float, lease_s: float, n: int) -> list[tuple[int, bytes]]:
        meta, claims, results, lines = self._keys(batch_id)
        now_ms, lease_ms = int(now_s * 1000), int(lease_s * 1000)
        flat = await self._script(_CLAIM, (meta, claims, results, lines), now_ms, lease_ms, n, int(now_s))
        return [(int(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]

    async def record(self, batch_id: str, index: int, result: bytes, is_ok: bool) -> bool:
        meta, claims, results, _ = self._keys(batch_id)
        counter = "completed" if is_ok else "failed"
        return bool(await self._script(_RECORD, (meta, claims, results), index, result, counter))

    async def release(self, batch_id: str, index: int, not_before_s: float) -> None:
        _, claims, _, _ = self._keys(batch_id)
        await self._run("ZADD", claims, "XX", int(not_before_s * 1000), index)  # only while claimed

    async def cancel(self, batch_id: str, now_s: float) -> bool:
        return bool(await self._script(_CANCEL, (self._keys(batch_id)[0],), int(now_s)))

    async def begin_finalizing(
        self, batch_id: str, now_s: float, lease_s: float, is_expired: bool
    ) -> str | None:
        meta, claims, _, _ = self._keys(batch_id)
        args = (int(now_s * 1000), int(lease_s * 1000), int(now_s), "1" if is_expired else "0")
        final = await self._script(_BEGIN, (meta, claims), *args)
        return final.decode() if final else None

    async def lines_and_results(self, batch_id: str) -> tuple[list[bytes], dict[int, bytes]]:
        _, _, results, lines = self._keys(batch_id)
        encoded: list[bytes] = []
        while chunk := await self._run("LRANGE", lines, len(encoded), len(encoded) + 999):
            encoded += chunk  # bounded replies, however long the file
            if len(chunk) < 1000:
                break
        async with Deadline(self.timeout_s * 10):  # every result at once: a larger reply
            flat: list[bytes] = await self.redis.resp.execute("HGETALL", results)
        return encoded, {int(index): value for index, value in zip(flat[::2], flat[1::2], strict=True)}

    async def finish(
        self, batch_id: str, final: str, now_s: float, output_file_id: str | None, error_file_id: str | None
    ) -> bool:
        args = (final, int(now_s), output_file_id or "", error_file_id or "")
        return bool(await self._script(_FINISH, self._keys(batch_id), *args))

    async def close(self) -> None:
        await self.redis.close()
