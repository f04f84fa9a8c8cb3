"""A lean, pipelined Redis connection for the hot path (one EVALSHA per admit and per settle).

redis-py's asyncio client spends ~100 us of CPU per command on pool checkout, retries and parsing
machinery; at 4,000 requests a second on one core that alone would cost the gateway a third of its
throughput. This client keeps one connection, writes each command as it comes (so concurrent
requests share TCP segments and Redis reads them as a pipeline) and matches replies in order with
hiredis' C parser. It does nothing else: no pools, no retries (the failover store decides), no
pub/sub. ``RespCommands`` (resp_commands.py) puts the caches' and admin paths' commands on it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis


class RespError(Exception):
    """An error reply from Redis (``NOSCRIPT ...``, ``ERR ...``)."""


def encode_command(args: tuple[Any, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        else:
            data = str(arg).encode()
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class _Protocol(asyncio.Protocol):
    def __init__(self, client: RespClient) -> None:
        self.client = client
        self.reader = hiredis.Reader(replyError=RespError)
        self.transport: Any = None  # asyncio's or uvloop's transport (not an asyncio.Transport subclass)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        pending = self.client._pending
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            if not pending:
                continue  # a reply nobody waits for (cannot happen while in order)
            future = pending.popleft()
            if future.done():
                continue  # its caller timed out; the reply still had to be consumed in order
            if isinstance(reply, RespError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(exc)


class RespClient:
    """One pipelined connection to a Redis server, reconnected on demand."""

    def __init__(self, url: str, *, connect_timeout_s: float = 1.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", ""):
            raise ValueError(f"unsupported Redis URL scheme {parts.scheme!r} (redis:// only)")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.db = int(parts.path.lstrip("/") or 0)
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.connect_timeout_s = connect_timeout_s
        self._protocol: _Protocol | None = None
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._connecting: asyncio.Future[None] | None = None
        self._outbox: list[bytes] = []
        """Commands written this loop turn: one write (one syscall) for all of them."""

    def _lost(self, exc: Exception | None) -> None:
        self._protocol = None
        error = ConnectionError(f"connection to Redis lost: {exc!r}" if exc else "connection to Redis closed")
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(error)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_timeout_s):
            _, protocol = await loop.create_connection(lambda: _Protocol(self), self.host, self.port)
        assert isinstance(protocol, _Protocol)
        self._protocol = protocol
        if self.password is not None:
            auth = ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            await self.execute(*auth)
        if self.db:
            await self.execute("SELECT", self.db)

    async def _ensure(self) -> _Protocol:
        while self._protocol is None:
            if self._connecting is None:
                self._connecting = asyncio.get_running_loop().create_future()
                try:
                    await self._connect()
                    self._connecting.set_result(None)
                except BaseException as e:
                    self._connecting.set_exception(ConnectionError(f"cannot connect to Redis: {e!r}"))
                    self._connecting.exception()  # retrieved: no "never retrieved" warning
                    raise ConnectionError(f"cannot connect to Redis: {e!r}") from e
                finally:
                    self._connecting = None
            else:
                await asyncio.shield(self._connecting)
        return self._protocol

    async def execute(self, *args: Any) -> Any:
        """Send one command; its reply (RespError for an error reply, ConnectionError when down)."""
        protocol = self._protocol or await self._ensure()
        transport = protocol.transport
        if transport is None or transport.is_closing():
            self._protocol = None
            raise ConnectionError("connection to Redis is closing")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append(future)
        if not self._outbox:
            loop.call_soon(self._flush, transport)
        self._outbox.append(encode_command(args))
        return await future

    def _flush(self, transport: Any) -> None:
        outbox, self._outbox = self._outbox, []
        if not transport.is_closing():
            transport.write(b"".join(outbox))

    async def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
