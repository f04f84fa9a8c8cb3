"""The default upstream client: HTTP/1.1 on asyncio protocols and llhttp, with a keep-alive pool.

It exists because the upstream client was a large share of the gateway's own cost: under wrk with
nginx as a canned upstream, aiohttp's client took 25-30% of the gateway's CPU per proxied request.
The gateway needs little of what aiohttp does (one method with a body, no cookies, redirects,
proxies or decompression), so this client does only that, on the parser uvicorn already uses; it
spends about a fifth of aiohttp's CPU per request (``bench/upstream_client.py`` measures the two).

A request is one write of preencoded bytes (the request line, ``Host`` and ``Accept-Encoding:
identity`` are built once per URL; bodies pass through untouched, never decompressed), then one
future awaited until the response headers are in. No task is created and no timeout context
entered per request: the deadlines live on the connection's own timer
(``gateway.replicas.http1_connection``).

The pool keeps idle connections per origin ``(scheme, host, port)`` and reuses the most recent first
(LIFO: the warm ones stay warm, the rest expire after ``keepalive_s``, 4 s by default: before the
servers' own idle timeouts, 5 s in uvicorn and llama.cpp, close them, so no request is written on a
connection the server is closing at that moment). A connection goes back only
when its response came in whole and the server keeps it alive; one the server closes while idle
leaves the pool at once. ``max_connections`` bounds the open connections of all origins together;
a request past it closes an idle connection of another origin, or waits its turn (FIFO).

Failures map onto the gateway's error tree as ``map_client_errors`` maps aiohttp's: a refused or
timed-out connect is ``UpstreamConnectError``; a connection that ends early or a malformed answer is
``UpstreamProtocolError`` (a stale pooled connection too: the retry stage retries it, before the first
byte); a deadline missed is ``UpstreamTimeout``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections import deque
from typing import NamedTuple
from urllib.parse import quote, urlsplit

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from gateway.replicas.http1_connection import DRAIN_S, Http1Connection, Origin
from gateway.replicas.http1_response import Http1Response
from gateway.replicas.pools import Timeouts

__all__ = ["Http1Response", "Http1UpstreamClient"]

_MAX_TARGETS = 1024
"""URLs whose request heads are kept (replica URLs and pass-through routes: a handful in practice)."""


class _Target(NamedTuple):
    """What a URL needs, built once: where to connect and the request heads."""

    origin: Origin
    host: str
    port: int
    is_https: bool
    post_head: bytes
    """``POST`` request line, ``Host`` and ``Accept-Encoding``; the caller's headers follow."""
    get_head: bytes
    """A whole ``GET`` request."""


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in ("http", "https") or not host:
        raise UpstreamError(f"{url}: not an http(s) URL")
    try:
        explicit_port = parts.port
    except ValueError:
        raise UpstreamError(f"{url}: bad port") from None
    is_https = scheme == "https"
    default_port = 443 if is_https else 80
    port = explicit_port or default_port
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    authority = f"[{host}]" if ":" in host else host
    if port != default_port:
        authority = f"{authority}:{port}"
    path = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
    if parts.query:
        path = f"{path}?{parts.query}"
    common = f" {path} HTTP/1.1\r\nHost: {authority}\r\nAccept-Encoding: identity\r\n"
    return _Target(
        (scheme, host, port),
        host,
        port,
        is_https,
        f"POST{common}".encode("latin-1"),
        f"GET{common}\r\n".encode("latin-1"),
    )


def _reason(error: OSError) -> str:
    """What failed a connect, in the OS's words ("Connection refused"; asyncio's own message names
    only the address)."""
    if isinstance(error, ssl.SSLError | socket.gaierror) or not error.errno:
        return error.strerror or str(error)
    return os.strerror(error.errno)


class Http1UpstreamClient:
    """An ``UpstreamClient`` of pooled keep-alive HTTP/1.1 connections (http and https)."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        keepalive_s: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self._ssl_context = ssl_context
        """For https; ``ssl.create_default_context()`` unless given."""
        self._targets: dict[str, _Target] = {}
        self._idle: dict[Origin, list[Http1Connection]] = {}
        self._connections: set[Http1Connection] = set()
        self._num_open = 0
        """Connections open or being opened: what ``max_connections`` bounds."""
        self._waiters: deque[tuple[Origin, asyncio.Future[Http1Connection | None]]] = deque()
        """Requests waiting for a connection (of their origin) or for a free slot (``None``), in order."""
        self._all_closed: asyncio.Future[None] | None = None

    @property
    def num_open(self) -> int:
        """Connections open or being opened."""
        return self._num_open

    @property
    def num_idle(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    @property
    def num_waiting(self) -> int:
        """Requests waiting for a connection (``max_connections`` reached)."""
        return len(self._waiters)

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= _MAX_TARGETS:
                self._targets.clear()
            target = self._targets[url] = _target(url)
        return target

    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        what: str,
        *,
        headers_s: float | None = None,
    ) -> Http1Response:
        """Send ``body``; return once the response headers arrived. ``headers_s`` bounds that wait
        (default ``timeouts.first_byte_s``); ``connect_s`` bounds the connect, ``total_s`` the exchange
        (reading the body included)."""
        target = self._targets.get(url) or self._target(url)
        if headers:
            text = "\r\n".join(map(": ".join, headers.items()))
            if text.count("\n") != len(headers) - 1 or text.count("\r") != len(headers) - 1:
                raise UpstreamError(f"{what}: a request header holds a line break")
            head = target.post_head + f"{text}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        else:
            head = target.post_head + f"Content-Length: {len(body)}\r\n\r\n".encode()
        return await self._exchange(
            target,
            head,
            body,
            what,
            timeouts.connect_s,
            timeouts.first_byte_s if headers_s is None else headers_s,
            timeouts.total_s,
        )

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        """``GET url``: the status and the whole body, all within ``timeout_s``."""
        target = self._target(url)
        response = await self._exchange(target, target.get_head, b"", url, timeout_s, timeout_s, timeout_s)
        try:
            body = await response.read()
        except BaseException:
            response.close()
            raise
        response.release()
        return response.status, body

    async def _exchange(
        self,
        target: _Target,
        head: bytes,
        body: bytes,
        what: str,
        connect_s: float,
        headers_s: float,
        total_s: float,
    ) -> Http1Response:
        """Send one request and wait for the response headers."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + total_s
        headers_at = min(now + headers_s, deadline)
        connection = self._take_idle(target.origin)
        if connection is None:
            connection = await self._connect(loop, target, what, now + connect_s, headers_at)
        connection.send(head, body, what, deadline)
        try:
            while connection.status == 0:
                if connection.error is not None:
                    raise connection.error
                await connection.wait(headers_at)
        except BaseException:
            connection.close()
            raise
        return Http1Response(connection)

    # the pool

    def _take_idle(self, origin: Origin) -> Http1Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()  # the most recent: LIFO
            connection.is_idle = False
            transport = connection.transport
            if transport is not None and not transport.is_closing():
                return connection
        return None

    async def _connect(
        self,
        loop: asyncio.AbstractEventLoop,
        target: _Target,
        what: str,
        connect_at: float,
        headers_at: float,
    ) -> Http1Connection:
        """A new connection, once there is room for one; a freed connection of the same origin may
        come instead. ``connect_at`` bounds the connect, ``headers_at`` the wait and the connect."""
        if self._num_open >= self.max_connections or self._waiters:
            connect_s = connect_at - loop.time()
            handed = await self._wait_turn(loop, target.origin, what, headers_at)
            if handed is not None:
                return handed
            connect_at = loop.time() + connect_s  # the wait for a slot is not the connect's time
        else:
            self._num_open += 1
        # from here this request holds a slot, until the connection it opens is gone
        ssl_context = None
        if target.is_https:
            ssl_context = self._ssl_context = self._ssl_context or ssl.create_default_context()
        connection = Http1Connection(self, target.origin, loop)
        try:
            async with asyncio.timeout_at(min(connect_at, headers_at)):
                await loop.create_connection(
                    lambda: connection,
                    target.host,
                    target.port,
                    ssl=ssl_context,
                    server_hostname=target.host if ssl_context is not None else None,
                )
        except BaseException as e:
            if not connection.was_opened:  # once opened, it gives the slot back itself when it is gone
                self._free_slot()
            if isinstance(e, TimeoutError) and e.errno is None:  # ours, not the OS's
                if headers_at < connect_at:
                    raise UpstreamTimeout(f"{what}: timed out") from None
                raise UpstreamConnectError(f"{what}: cannot connect (timed out)") from None
            if isinstance(e, OSError):
                raise UpstreamConnectError(f"{what}: cannot connect ({_reason(e)})") from None
            raise
        return connection  # if it is already gone, send() fails the exchange

    async def _wait_turn(
        self, loop: asyncio.AbstractEventLoop, origin: Origin, what: str, until: float
    ) -> Http1Connection | None:
        """Wait in line for a slot (``None``) or a connection of ``origin`` another request freed."""
        if self._num_open >= self.max_connections:
            self._evict_idle()
        waiter: asyncio.Future[Http1Connection | None] = loop.create_future()
        entry = (origin, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout_at(until):
                return await waiter
        except BaseException as e:
            if waiter.done() and not waiter.cancelled():  # served, but this request gave up: pass it on
                handed = waiter.result()
                if handed is None:
                    self._free_slot()
                else:
                    self._hand_on(handed)
            else:  # still in line (its future cancelled with the task)
                waiter.cancel()
                self._waiters.remove(entry)
            if isinstance(e, TimeoutError):
                raise UpstreamTimeout(f"{what}: timed out") from None
            raise

    def _evict_idle(self) -> None:
        """Close the oldest idle connection of any origin: its slot goes to the first in line."""
        for idle in self._idle.values():
            if idle:
                connection = idle.pop(0)
                connection.is_idle = False
                connection.close()
                return

    def _free_slot(self) -> None:
        self._num_open -= 1
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                self._num_open += 1
                waiter.set_result(None)
                return

    def _hand_on(self, connection: Http1Connection) -> None:
        """A ready connection goes to the first in line if it waits for this origin; if it waits for
        another, the connection closes so that its slot goes to that one; with no one waiting, it
        joins the idle list."""
        waiters = self._waiters
        while waiters:
            origin, waiter = waiters[0]
            if waiter.done():
                waiters.popleft()
            elif origin == connection.origin:
                waiters.popleft()
                waiter.set_result(connection)
                return
            else:
                connection.close()
                return
        connection.is_idle = True
        self._idle.setdefault(connection.origin, []).append(connection)

    # what connections report (http1_connection._Owner)

    def reuse(self, connection: Http1Connection) -> None:
        """A released response's connection: back to the pool if it may be reused, else closed."""
        transport = connection.transport
        if connection.error is not None or transport is None or transport.is_closing():
            connection.close()
            return
        if not connection.is_complete and connection.is_framed:  # its tail is on its way: drain it
            connection.drain(connection.loop.time() + DRAIN_S)
            return
        if not connection.is_complete or not connection.keep_alive:
            connection.close()
            return
        connection.finish(connection.loop.time() + self.keepalive_s)
        self._hand_on(connection)

    def connection_opened(self, connection: Http1Connection) -> None:
        self._connections.add(connection)

    def connection_closed(self, connection: Http1Connection) -> None:
        self._connections.discard(connection)
        if connection.is_idle:
            connection.is_idle = False
            self._idle[connection.origin].remove(connection)
        self._free_slot()
        if not self._connections and self._all_closed is not None and not self._all_closed.done():
            self._all_closed.set_result(None)

    async def close(self) -> None:
        """Close every connection, and wait (briefly) until they are gone."""
        if not self._connections:
            return
        self._all_closed = asyncio.get_running_loop().create_future()
        for connection in list(self._connections):
            connection.abort()
        try:
            async with asyncio.timeout(1.0):
                await self._all_closed
        except TimeoutError:
            pass
        finally:
            self._all_closed = None
