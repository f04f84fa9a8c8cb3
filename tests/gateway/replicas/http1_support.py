"""Servers and helpers for the HTTP/1.1 client's tests: a raw loopback server scripted byte by byte."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from ssl import SSLContext
from types import TracebackType
from typing import Any

from gateway.replicas.http1 import Http1UpstreamClient
from gateway.replicas.pools import Timeouts

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter
Handler = Callable[["RawServer", Reader, Writer], Awaitable[None]]
"""Serves one accepted connection; the server closes it when the handler returns."""

TIMEOUTS = Timeouts(connect_s=5.0, first_byte_s=5.0, idle_s=5.0, total_s=10.0)
"""Generous: for the tests where no timeout is the behaviour under test."""
SHORT = Timeouts(connect_s=0.2, first_byte_s=0.2, idle_s=0.2, total_s=10.0)
"""For the tests where a timeout is the behaviour under test."""


class RawServer:
    """A loopback HTTP server that runs ``handler`` on each connection it accepts."""

    def __init__(self, handler: Handler, *, ssl: SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl = ssl
        self.num_connections = 0
        self.num_closed = 0
        """Connections whose handler is done (the client closed, or the handler returned)."""
        self.heads: list[bytes] = []
        """Every request's head, as ``read_request`` read it."""
        self.bodies: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._port = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        return self._port

    def url(self, path: str = "/v1/chat/completions") -> str:
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.num_connections += 1
        try:
            await self.handler(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went, or the test is over (a cancelled handler would be logged as an error)
        finally:
            self.num_closed += 1
            writer.close()
            self._tasks.discard(task)

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One request's body, after its head (kept in ``heads``)."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                self.bodies.append(await reader.readexactly(int(value)))
                return self.bodies[-1]
        self.bodies.append(b"")
        return b""


async def stall(server: RawServer, reader: Reader, writer: Writer) -> None:
    """Read the request, answer nothing, wait for the client to go."""
    await server.read_request(reader)
    await reader.read()


def ok(body: bytes, *extra: bytes, content_type: bytes = b"application/json") -> bytes:
    """A whole 200 response with a Content-Length; ``extra`` header lines go in as they are."""
    lines = [b"HTTP/1.1 200 OK", b"Content-Type: " + content_type, *extra, b"Content-Length: %d" % len(body)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def chunked(*parts: bytes) -> bytes:
    """Parts in chunked transfer coding, the last chunk included."""
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def answering(response: bytes) -> Handler:
    """Answer every request on the connection with ``response``, until the client closes."""

    async def handler(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(response)
            await writer.drain()

    return handler


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for ``condition`` (polled each few milliseconds); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


@asynccontextmanager
async def opened(**options: Any) -> AsyncIterator[Http1UpstreamClient]:
    """A client, closed after."""
    client = Http1UpstreamClient(**options)
    try:
        yield client
    finally:
        await client.close()


async def post(
    client: Http1UpstreamClient, url: str, body: bytes = b"{}", timeouts: Timeouts = TIMEOUTS
) -> tuple[int, bytes]:
    """One plain exchange: the status and the body; the connection released."""
    response = await client.post(url, body, {"Content-Type": "application/json"}, timeouts, "upstream r0")
    payload = await response.read()
    response.release()
    return response.status, payload


async def numbered(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request on the connection with its number (1: the first the server accepted)."""
    number = server.num_connections
    while True:
        await server.read_request(reader)
        writer.write(ok(b"%d" % number))
        await writer.drain()
