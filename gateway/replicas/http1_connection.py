"""One keep-alive HTTP/1.1 connection to a replica, and the response read from it.

The connection is an ``asyncio.Protocol`` that feeds what arrives to ``httptools.HttpResponseParser``
(llhttp, the parser uvicorn uses) and keeps one exchange's state: the status and headers, the body
bytes nobody has read yet, whether the message is complete and the server lets the connection be
reused. Its reader (``http1_response.Http1Response``) takes the buffered bytes and, when there are
none, awaits one future that the next callback resolves: no streams, no tasks, no per-read timeout
contexts.

Every deadline of the connection runs on one lazy ``loop.call_at`` timer: the exchange's total
deadline, the current wait's (the response headers, the next chunk) and, while the connection sits
in the pool, its idle expiry. Moving a deadline later costs nothing (the timer, when it fires early,
re-arms itself at the deadline then in force); only an earlier one replaces the timer. In the common
case a request schedules no timer at all.

The body is framed by llhttp (Content-Length, chunked, which it decodes) or, with neither header, by
the end of the connection. More than ``HIGH_WATER`` unread bytes pause reading from the socket until
the reader takes them: a slow client slows the upstream, it never fills the gateway's memory.

A response released before its last byte (a stream relayed up to ``[DONE]``, whose terminating chunk
is still on its way) drains: what else arrives is dropped, and the connection returns to the pool when
the message completes, or closes if that takes over ``DRAIN_S``. A stream then costs no new connection.
"""

from __future__ import annotations

import asyncio
from math import inf
from typing import Protocol, cast

import httptools

from gateway.errors import GatewayError, UpstreamProtocolError, UpstreamTimeout

__all__ = ["DRAIN_S", "HIGH_WATER", "MAX_HEAD", "Http1Connection", "Origin"]

Origin = tuple[str, str, int]
"""``(scheme, host, port)``: connections are pooled per origin."""

HIGH_WATER = 256 * 1024
"""Unread body bytes above which the connection stops reading from the socket."""
MAX_HEAD = 1024 * 1024
"""The most bytes a status line and headers may take; more is a broken response."""
DRAIN_S = 1.0
"""The longest a released response's tail may take to arrive before its connection is closed instead."""
_SLACK_S = 0.001
"""A timer that fires this close to its deadline counts as on time (loop clocks round)."""


class _Owner(Protocol):
    """The pool a connection tells when it opens and when it is gone."""

    def connection_opened(self, connection: Http1Connection) -> None: ...

    def connection_closed(self, connection: Http1Connection) -> None: ...

    def reuse(self, connection: Http1Connection) -> None: ...


class Http1Connection(asyncio.Protocol):
    """A pooled connection: idle, or busy with one exchange (request sent, response being read)."""

    __slots__ = (
        "_timer",
        "_timer_at",
        "buffer",
        "buffered",
        "content_type",
        "deadline",
        "error",
        "head_bytes",
        "idle_until",
        "is_busy",
        "is_complete",
        "is_draining",
        "is_framed",
        "is_idle",
        "is_informational",
        "is_paused",
        "keep_alive",
        "loop",
        "origin",
        "owner",
        "parser",
        "raw_headers",
        "status",
        "transport",
        "wait_deadline",
        "waiter",
        "was_opened",
        "what",
    )

    def __init__(self, owner: _Owner, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner
        self.origin = origin
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.was_opened = False
        """Connected once (then its owner counts it until it is gone)."""
        self.parser = httptools.HttpResponseParser(self)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = inf
        self.idle_until = inf
        self.is_idle = False
        """In the owner's idle list."""
        self.is_busy = False
        self.what = ""
        self.deadline = inf
        """The exchange's total deadline (loop time)."""
        self.wait_deadline = inf
        self.waiter: asyncio.Future[None] | None = None
        self.status = 0
        """The response's status; 0 until its headers are complete."""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.content_type = ""
        self.is_framed = False
        """Content-Length or Transfer-Encoding seen: the end of the connection is not the end of the body."""
        self.is_informational = False
        self.is_complete = False
        self.is_draining = False
        """Released before its last byte: the rest is dropped, then the connection goes back to the pool."""
        self.keep_alive = False
        self.error: GatewayError | None = None
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.is_paused = False
        self.head_bytes = 0

    # the exchange, as the client drives it

    def send(self, head: bytes, body: bytes, what: str, deadline: float) -> None:
        """Start an exchange: write the request, in one call, and arm its total deadline. A connection
        already gone (it went while handed from one request to the next) fails it at once."""
        self.is_busy = True
        self.what = what
        self.deadline = deadline
        self.status = 0
        self.raw_headers = []
        self.content_type = ""
        self.is_framed = self.is_complete = self.keep_alive = False
        self.error = None
        self.head_bytes = 0
        transport = self.transport
        if transport is None:
            self.error = UpstreamProtocolError(f"{what}: broken response (server disconnected)")
            return
        if deadline < self._timer_at:
            self._arm(deadline)
        if body:
            transport.writelines((head, body))
        else:
            transport.write(head)

    async def wait(self, deadline: float) -> None:
        """Until the next callback (headers, body, the end, a failure) or ``deadline``, whichever is
        first; a missed deadline leaves an ``UpstreamTimeout`` in ``error``."""
        waiter = self.loop.create_future()
        self.waiter = waiter
        self.wait_deadline = deadline
        if deadline < self._timer_at:
            self._arm(deadline)
        try:
            await waiter
        finally:
            self.waiter = None
            self.wait_deadline = inf

    def take(self) -> bytes:
        """Every buffered body byte, and reading resumed if it was paused."""
        buffer = self.buffer
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self.buffered = 0
        if self.is_paused and self.transport is not None:
            self.is_paused = False
            self.transport.resume_reading()
        return data

    def finish(self, idle_until: float) -> None:
        """The exchange is over and the connection goes back to the pool (idle until ``idle_until``)."""
        self.is_busy = False
        self.buffer.clear()
        self.buffered = 0
        self.idle_until = idle_until
        if self.is_paused and self.transport is not None:
            self.is_paused = False
            self.transport.resume_reading()
        if idle_until < self._timer_at:
            self._arm(idle_until)

    def close(self) -> None:
        """Close the connection; an exchange under way fails (its reader, if any, sees why)."""
        if self.transport is not None:
            self._fail(UpstreamProtocolError(f"{self.what}: connection closed by the gateway"))

    def abort(self) -> None:
        """Close at once, unsent bytes dropped (the client is closing)."""
        if self.transport is not None:
            self._fail(UpstreamProtocolError(f"{self.what}: connection closed by the gateway"))
            if self.transport is not None:
                self.transport.abort()

    # timers

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(at, self._on_timer)
        self._timer_at = at

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = inf
        if self.transport is None:
            return
        now = self.loop.time() + _SLACK_S
        if not self.is_busy:
            if now >= self.idle_until:  # idle too long: the pool forgets it when it is gone
                self.transport.close()
            else:
                self._arm(self.idle_until)
            return
        wait_deadline = self.wait_deadline if self.waiter is not None else inf
        if now >= self.deadline or now >= wait_deadline:
            self._fail(UpstreamTimeout(f"{self.what}: timed out"))
        else:
            self._arm(min(self.deadline, wait_deadline))

    def _fail(self, error: GatewayError) -> None:
        """The exchange cannot go on: record why (unless the body is all here), wake the reader, close."""
        if self.is_busy and not self.is_complete and self.error is None:
            self.error = error
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.was_opened = True
        self.owner.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        if not self.is_busy or self.is_complete:  # bytes nobody asked for: never reuse this connection
            self.keep_alive = False
            if not self.is_busy and self.transport is not None:
                self.transport.close()
            return
        if self.status == 0:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD:
                self._fail(UpstreamProtocolError(f"{self.what}: broken response (headers too long)"))
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamProtocolError(f"{self.what}: broken response (unexpected upgrade)"))
        except httptools.HttpParserError as e:
            self._fail(UpstreamProtocolError(f"{self.what}: broken response ({e})"))

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost decides what the end means

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.is_busy and not self.is_complete and self.error is None:
            if self.status and not self.is_framed and exc is None:
                self.is_complete = True  # a body without framing ends with the connection
                self.keep_alive = False
            elif self.head_bytes == 0:  # like aiohttp's ServerDisconnectedError: a stale pooled connection
                self.error = UpstreamProtocolError(f"{self.what}: broken response (server disconnected)")
            else:
                self.error = UpstreamProtocolError(f"{self.what}: broken response (connection closed)")
        self._wake()
        self.owner.connection_closed(self)

    # httptools callbacks (they must not raise)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))
        size = len(name)
        if size == 12 and name.lower() == b"content-type":
            self.content_type = value.decode("latin-1")
        elif (size == 14 and name.lower() == b"content-length") or (
            size == 17 and name.lower() == b"transfer-encoding"
        ):
            self.is_framed = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the real response follows
            self.is_informational = True
            self.raw_headers = []
            self.content_type = ""
            self.is_framed = False
            return
        self.status = status
        self._wake()

    def drain(self, until: float) -> None:
        """Released early: drop the unread body and what else comes; reused once the message is complete
        (``on_message_complete``), closed by the timer at ``until``."""
        self.is_draining = True
        self.buffer.clear()
        self.buffered = 0
        if self.is_paused and self.transport is not None:
            self.is_paused = False
            self.transport.resume_reading()
        if until < self.deadline:
            self.deadline = until
            if until < self._timer_at:
                self._arm(until)

    def on_body(self, body: bytes) -> None:
        if self.is_draining:
            return
        self.buffer.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.is_paused and self.transport is not None:
            self.is_paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.is_informational:
            self.is_informational = False
            return
        self.is_complete = True
        self.keep_alive = self.parser.should_keep_alive()
        if self.is_draining:
            self.is_draining = False
            self.owner.reuse(self)
            return
        self._wake()
