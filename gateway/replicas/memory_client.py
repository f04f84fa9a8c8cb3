"""An in-memory ``UpstreamClient``: the test seam of the upstream, in the spirit of ``httpx.MockTransport``.

A handler answers every request, from its URL, body and headers::

    def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        if url.endswith("/health"):
            return Reply(status=200)
        return Reply.json({"choices": [...], "usage": {...}})

    client = MemoryUpstreamClient(handler)

A ``Reply`` is a status and a body (``Reply.json``) or a stream of server-sent events
(``Reply.sse``); a stream's parts may be exceptions, raised at that point of the stream (a cut
connection, a stall). The handler may be async, and may raise. What it raises, and what a stream
raises, goes through ``map_client_errors`` as the aiohttp client's errors do: the gateway's own
errors (``UpstreamConnectError``, ``UpstreamTimeout``) pass unchanged, and foreign ones
(``TimeoutError``, ``aiohttp.ClientConnectorError``) become what production would raise.

Nothing waits on a clock: the parts of a stream are all there, so idle timeouts never fire (a stall
is an ``UpstreamTimeout`` part). Only an async handler that never returns meets the real
headers timeout. Every request is recorded in ``requests``, every response in ``responses`` (to
check that the caller released or closed it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gateway.replicas.aiohttp_client import map_client_errors
from gateway.replicas.pools import Timeouts

__all__ = ["Handler", "MemoryRequest", "MemoryUpstreamClient", "MemoryUpstreamResponse", "Reply"]

_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Reply:
    """What the upstream answers: a status and a body, or (``parts`` set) a stream."""

    status: int = 200
    body: bytes = b""
    """A plain response's body (ignored when ``parts`` is set)."""
    parts: tuple[bytes | BaseException, ...] | None = None
    """A streamed body, one network read a part; an exception part is raised when the reader gets there."""
    content_type: str = "application/json"
    retry_after: str | None = None
    """The ``Retry-After`` header it sends."""

    @classmethod
    def json(cls, document: Any, *, status: int = 200, retry_after: str | None = None) -> Reply:
        """A JSON body."""
        return cls(status, msgspec.json.encode(document), retry_after=retry_after)

    @classmethod
    def sse(cls, *events: Any, done: bool = True, status: int = 200) -> Reply:
        """A stream of server-sent events: a document becomes one ``data:`` event, bytes go out as
        they are (a partial event, a comment), an exception is raised there; ``[DONE]`` ends it
        unless ``done=False``."""
        parts: list[bytes | BaseException] = [
            e if isinstance(e, bytes | BaseException) else b"data: " + msgspec.json.encode(e) + b"\n\n"
            for e in events
        ]
        if done:
            parts.append(_DONE)
        return cls(status, parts=tuple(parts), content_type="text/event-stream")


Handler = Callable[[str, bytes, Mapping[str, str]], Reply | Awaitable[Reply]]
"""``(url, body, headers) -> Reply``, sync or async; a GET has an empty body and no headers."""


@dataclass(frozen=True, slots=True)
class MemoryRequest:
    """One request the client was asked to send."""

    method: str
    url: str
    body: bytes
    headers: Mapping[str, str]
    what: str
    timeouts: Timeouts | None = None
    headers_s: float | None = None
    """The bound on the response headers the caller asked for (``post``'s ``headers_s``)."""

    def json(self) -> Any:
        """The body, decoded."""
        return msgspec.json.decode(self.body)


class MemoryUpstreamResponse:
    """A ``Reply`` behind the ``UpstreamResponse`` interface; records how its reader ended it."""

    def __init__(self, reply: Reply, what: str) -> None:
        self.reply = reply
        self.what = what
        self.status = reply.status
        self.content_type = reply.content_type
        self.retry_after = reply.retry_after
        self.is_released = False
        self.is_closed = False
        self.idle_s: float | None = None
        self.first_s: float | None = None
        """The timeouts the reader passed to ``chunks`` (for assertions)."""

    def _parts(self) -> tuple[bytes | BaseException, ...]:
        return self.reply.parts if self.reply.parts is not None else (self.reply.body,)

    async def read(self) -> bytes:
        data = []
        with map_client_errors(self.what):
            for part in self._parts():
                if isinstance(part, BaseException):
                    raise part
                data.append(part)
        return b"".join(data)

    async def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        self.idle_s, self.first_s = idle_s, first_s
        with map_client_errors(self.what):
            for part in self._parts():
                if isinstance(part, BaseException):
                    raise part
                yield part

    def close(self) -> None:
        self.is_closed = True

    def release(self) -> None:
        self.is_released = True


@dataclass(eq=False)
class MemoryUpstreamClient:
    """An ``UpstreamClient`` whose every answer comes from ``handler``."""

    handler: Handler
    requests: list[MemoryRequest] = field(default_factory=list)
    responses: list[MemoryUpstreamResponse] = field(default_factory=list)
    is_closed: bool = False

    async def _answer(self, request: MemoryRequest, timeout_s: float) -> Reply:
        self.requests.append(request)
        with map_client_errors(request.what):
            reply = self.handler(request.url, request.body, request.headers)
            if not isinstance(reply, Reply):  # an async handler
                async with asyncio.timeout(timeout_s):
                    reply = await reply
        return reply

    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        what: str,
        *,
        headers_s: float | None = None,
    ) -> MemoryUpstreamResponse:
        request = MemoryRequest("POST", url, body, dict(headers), what, timeouts, headers_s)
        reply = await self._answer(request, timeouts.first_byte_s if headers_s is None else headers_s)
        response = MemoryUpstreamResponse(reply, what)
        self.responses.append(response)
        return response

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        reply = await self._answer(MemoryRequest("GET", url, b"", {}, url), timeout_s)
        return reply.status, await MemoryUpstreamResponse(reply, url).read()

    async def close(self) -> None:
        self.is_closed = True
