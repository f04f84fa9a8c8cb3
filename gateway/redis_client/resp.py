"""A lean, pipelined Redis connection for the hot path (one EVALSHA per admit and per settle).

redis-py's asyncio client spends ~100 us of CPU per command on pool checkout, retries and parsing
machinery; at 4,000 requests a second on one core that alone would cost the gateway a third of its
throughput. This client keeps one connection, writes each command as it comes (so concurrent
requests share TCP segments and Redis reads them as a pipeline) and matches replies in order with
hiredis' C parser. No pools, no retries of a command (the failover store decides), no pub/sub.
``RespCommands`` (commands.py) puts the caches' and admin paths' commands on it; ``ClusterClient``
(cluster.py) routes commands over one of these per cluster node.

Connecting (url.py has the URL forms): TLS when the URL says ``rediss``, then ``AUTH`` and ``SELECT``
on every new connection. With Sentinel, the primary's address is asked of the sentinels on every
connect, and a ``READONLY`` or ``LOADING`` reply (the node is no longer, or not yet, a primary) drops
the connection so the next call asks again. After a connect failed in a way that costs time or load (a
timeout, a TLS or AUTH failure, sentinels without an answer), further attempts wait a bounded
exponential backoff with jitter (calls in between fail at once): a sick Redis is not hammered by every
caller, and a returning one is tried again within ``max_backoff_s``. A refused connect (nothing
listens: ~0.1 ms, and the store's and caches' breakers already pace calls) is retried by the next
call, so a restarted Redis is used at once.
"""

from __future__ import annotations

import asyncio
import collections
import random
import socket
import ssl
import time
from typing import Any

import hiredis

from gateway.redis_client.deadline import Deadline
from gateway.redis_client.url import Address, RedisTarget, parse_url


class RespError(Exception):
    """An error reply from Redis (``NOSCRIPT ...``, ``ERR ...``)."""


class RedisAuthError(ConnectionError):
    """Redis refused this client's credentials (``AUTH``)."""


class RedisTLSError(ConnectionError):
    """The TLS handshake failed: the server's certificate did not verify, or it refused ours."""


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


TCP_USER_TIMEOUT_MS = 3000
"""How long written data may go unacknowledged before the kernel drops the connection (Linux)."""

_REDISCOVER = ("READONLY", "LOADING")
"""Error replies after which a Sentinel-managed connection is dropped and the primary asked again."""


class _Protocol(asyncio.Protocol):
    """One connection: its replies matched in order to the futures of the commands written."""

    def __init__(self, client: RespClient) -> None:
        self.client = client
        self.reader = hiredis.Reader(replyError=RespError)
        self.transport: Any = None  # asyncio's or uvloop's transport (not an asyncio.Transport subclass)
        self.pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.outbox: list[bytes] = []
        """Commands written this loop turn: one write (one syscall) for all of them."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(socket, "TCP_USER_TIMEOUT"):
            # a command unacknowledged this long means the path to Redis is gone (a partition, a
            # dead host): the kernel drops the connection and the next call connects afresh, instead
            # of waiting on TCP's doubling retransmits (minutes) after the network heals
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        pending = self.pending
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            if not pending:
                continue  # a reply nobody waits for (cannot happen while in order)
            future = pending.popleft()
            if isinstance(reply, RespError):
                if self.client.target.mode == "sentinel" and str(reply).startswith(_REDISCOVER):
                    self.transport.close()  # not the primary (any more): the next call asks the sentinels
                if not future.done():
                    future.set_exception(reply)
            elif not future.done():  # a done one: its caller timed out; the reply was consumed in order
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(self, exc)

    def send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Queue one command into this loop turn's write; the future gets its reply."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.pending.append(future)
        if not self.outbox:
            loop.call_soon(self.flush)
        self.outbox.append(encode_command(args))
        return future

    def flush(self) -> None:
        outbox, self.outbox = self.outbox, []
        if not self.transport.is_closing():
            self.transport.write(b"".join(outbox))


class RespClient:
    """One pipelined connection to a Redis server (or Sentinel's primary), reconnected on demand.

    Args:
        url_or_target: a URL (url.py) or a parsed target; cluster URLs go to ``ClusterClient``.
        connect_timeout_s: the most one connect may take (TCP, TLS, AUTH, SELECT; Sentinel's query).
        min_backoff_s, max_backoff_s: the wait after the second failed connect in a row (refused
            ones aside), doubling to at most ``max_backoff_s``, each drawn between half and all of it;
            the first retry is immediate.
    """

    def __init__(
        self,
        url_or_target: str | RedisTarget,
        *,
        connect_timeout_s: float = 1.0,
        min_backoff_s: float = 0.025,
        max_backoff_s: float = 1.0,
    ) -> None:
        target = parse_url(url_or_target) if isinstance(url_or_target, str) else url_or_target
        if target.mode == "cluster":
            raise ValueError("a cluster URL needs ClusterClient (open_client picks it)")
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.address: Address | None = target.addresses[0] if target.mode == "single" else None
        """The node connected to (Sentinel: the primary last found)."""
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._num_failures = 0
        self._retry_at = 0.0
        self._last_error: BaseException | None = None

    def _lost(self, protocol: _Protocol, exc: Exception | None) -> None:
        if self._protocol is protocol:
            self._protocol = None
        error = ConnectionError(f"connection to Redis lost: {exc!r}" if exc else "connection to Redis closed")
        while protocol.pending:
            future = protocol.pending.popleft()
            if not future.done():
                future.set_exception(error)

    async def _primary(self) -> Address:
        """Sentinel: the primary's address, from the first sentinel that knows it."""
        errors: list[str] = []
        for address in self.target.addresses:
            sentinel = RespClient(self.target.sentinel(address), connect_timeout_s=self.connect_timeout_s)
            try:
                reply = await sentinel.execute("SENTINEL", "get-master-addr-by-name", self.target.service)
            except (OSError, RespError) as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
                continue
            finally:
                await sentinel.close()
            if reply:
                return reply[0].decode(), int(reply[1])
            errors.append(f"{address[0]}:{address[1]}: no primary named {self.target.service!r}")
        raise ConnectionError(f"no sentinel gave the primary of {self.target.service!r}: {'; '.join(errors)}")

    async def _connect(self) -> _Protocol:
        target = self.target
        host, port = await self._primary() if target.mode == "sentinel" else target.addresses[0]
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(
                lambda: _Protocol(self),
                host,
                port,
                ssl=target.tls,
                server_hostname=host if target.tls else None,
            )
        except ssl.SSLError as e:
            raise RedisTLSError(f"TLS handshake with Redis at {host}:{port} failed: {e}") from e
        assert isinstance(protocol, _Protocol)
        try:
            if target.password is not None:
                auth = (
                    ("AUTH", target.username, target.password)
                    if target.username
                    else ("AUTH", target.password)
                )
                try:
                    await protocol.send(auth)
                except RespError as e:
                    user = f"user {target.username!r}" if target.username else "the default user"
                    raise RedisAuthError(f"Redis at {host}:{port} refused the password of {user}: {e}") from e
            if target.db:
                await protocol.send(("SELECT", target.db))
            if target.mode == "sentinel":
                role = await protocol.send(("ROLE",))
                if role[0] != b"master":  # the sentinels' view lags a failover: ask again next time
                    raise ConnectionError(
                        f"{host}:{port}, given by the sentinels, is a {role[0]!r}, not a primary"
                    )
        except BaseException:
            protocol.transport.close()
            raise
        self.address = (host, port)
        return protocol

    async def _ensure(self) -> _Protocol:
        while self._protocol is None:
            if self._connecting is None:
                wait_s = self._retry_at - time.monotonic()
                if wait_s > 0:
                    raise ConnectionError(
                        f"Redis unreachable ({self._last_error}); next connect in {wait_s * 1000:.0f} ms"
                    )
                self._connecting = asyncio.get_running_loop().create_future()
                try:
                    async with Deadline(self.connect_timeout_s):  # a blocked loop is no slow Redis
                        self._protocol = await self._connect()
                    self._num_failures = 0
                    self._connecting.set_result(None)
                except BaseException as e:
                    error = (
                        e
                        if isinstance(e, ConnectionError)
                        else ConnectionError(f"cannot connect to Redis: {e!r}")
                    )
                    self._failed(error, backoff=not isinstance(e, ConnectionRefusedError))
                    self._connecting.set_exception(error)
                    self._connecting.exception()  # retrieved: no "never retrieved" warning
                    if error is e or isinstance(e, asyncio.CancelledError):  # the caller's timeout: theirs
                        raise
                    raise error from e
                finally:
                    self._connecting = None
            else:
                await asyncio.shield(self._connecting)
        return self._protocol

    def _failed(self, error: BaseException, *, backoff: bool) -> None:
        """Back off: no wait before the first retry, then min_backoff_s doubling up to max_backoff_s."""
        self._num_failures += 1
        self._last_error = error
        if backoff and self._num_failures > 1:
            ceiling = min(self.max_backoff_s, self.min_backoff_s * 2 ** (self._num_failures - 2))
            self._retry_at = time.monotonic() + random.uniform(ceiling / 2, ceiling)

    async def _ready(self) -> _Protocol:
        protocol = self._protocol or await self._ensure()
        if protocol.transport.is_closing():
            self._protocol = None
            raise ConnectionError("connection to Redis is closing")
        return protocol

    async def execute(self, *args: Any) -> Any:
        """Send one command; its reply (RespError for an error reply, ConnectionError when down)."""
        protocol = self._protocol or await self._ensure()
        if protocol.transport.is_closing():
            self._protocol = None
            raise ConnectionError("connection to Redis is closing")
        return await protocol.send(args)

    async def execute_asking(self, *args: Any) -> Any:
        """Cluster: ``ASKING`` and the command, back to back on this connection (the ASK redirect)."""
        protocol = await self._ready()
        replies = await asyncio.gather(protocol.send(("ASKING",)), protocol.send(args))
        return replies[1]

    async def primaries(self) -> list[RespClient]:
        """The nodes that hold keys: this one (``ClusterClient`` answers with every primary)."""
        return [self]

    async def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
