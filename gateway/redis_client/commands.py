"""RespCommands: the few Redis commands the caches and the admin paths send, on one RespClient.

redis-py's asyncio client cost every gateway worker ~19 MiB and ~0.4 s of import (it pulls in
OpenTelemetry's metrics SDK) for the eight commands below. Replies are hiredis': bulk strings as
bytes, nil as None, integers as int. Nothing here bounds time or retries: callers wrap each call in
their own timeout (the cache guard, the store), and the connection reopens on the next call after
Redis went away. Failures raise ``RespError`` (an error reply), ``ConnectionError`` (down) or
whatever the caller's timeout raises. Calls awaited together (``asyncio.gather``) leave in one write:
that is the pipeline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from gateway.redis_client.connect import Connection, open_client
from gateway.redis_client.resp import RespError

Arg = str | bytes | int | float
"""A command argument: str is sent UTF-8 encoded, numbers as their decimal text."""


class RespCommands:
    """Typed Redis commands over a ``RespClient`` or ``ClusterClient`` (owned: ``close`` closes it)."""

    def __init__(self, client: Connection) -> None:
        self.resp = client

    @classmethod
    def from_url(cls, url: str, *, connect_timeout_s: float = 1.0) -> RespCommands:
        """Commands on a new connection to ``url`` (any form of url.py: TLS, ACL, Sentinel, Cluster),
        opened on the first call."""
        return cls(open_client(url, connect_timeout_s=connect_timeout_s))

    async def get(self, key: str) -> bytes | None:
        reply: bytes | None = await self.resp.execute("GET", key)
        return reply

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """One value (or None) per key, in order; ``keys`` must not be empty."""
        reply: list[bytes | None] = await self.resp.execute("MGET", *keys)
        return reply

    async def set(self, key: str, value: Arg, *, px: int | None = None, nx: bool = False) -> bool:
        """True when stored; False when ``nx`` and the key exists."""
        args: list[Arg] = ["SET", key, value]
        if px is not None:
            args += ["PX", px]
        if nx:
            args.append("NX")
        return await self.resp.execute(*args) is not None  # b"OK", or nil when NX found the key

    async def delete(self, *keys: str) -> int:
        """The number of keys that existed."""
        reply: int = await self.resp.execute("DEL", *keys)
        return reply

    async def evalsha(self, sha: str, source: str, keys: Sequence[str], *args: Arg) -> Any:
        """Run the script ``source`` (whose SHA1 is ``sha``); loaded on NOSCRIPT (a fresh or flushed
        Redis) and called again."""
        try:
            return await self.resp.execute("EVALSHA", sha, len(keys), *keys, *args)
        except RespError as error:
            if not str(error).startswith("NOSCRIPT"):
                raise
        await self.resp.execute("SCRIPT", "LOAD", source)
        return await self.resp.execute("EVALSHA", sha, len(keys), *keys, *args)

    async def scan_iter(self, *, match: str | None = None, count: int | None = None) -> AsyncIterator[bytes]:
        """Every key (matching ``match``), by SCAN on every primary (a Cluster's too): a key may come
        twice if the keyspace changes (or its slot moves) meanwhile."""
        options: list[Arg] = []
        if match is not None:
            options += ["MATCH", match]
        if count is not None:
            options += ["COUNT", count]
        for node in await self.resp.primaries():
            cursor: bytes = b"0"
            while True:
                cursor, keys = await node.execute("SCAN", cursor, *options)
                for key in keys:
                    yield key
                if cursor == b"0":
                    break

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        """The hash's fields (empty when the key does not exist)."""
        flat: list[bytes] = await self.resp.execute("HGETALL", key)  # RESP2: field, value, field, ...
        return dict(zip(flat[::2], flat[1::2], strict=True))

    async def ping(self) -> bool:
        return bool(await self.resp.execute("PING") == b"PONG")

    async def close(self) -> None:
        await self.resp.close()
