"""The response of one exchange on an ``Http1Connection``, behind the ``UpstreamResponse`` seam.

Its headers have arrived; the body is read from the connection's buffer (``read``, ``chunks``), and the
connection goes back to the pool (``release``: at once when the body is complete, after draining its
tail otherwise) or is dropped (``close``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.errors import UpstreamProtocolError
from gateway.replicas.http1_connection import Http1Connection

__all__ = ["Http1Response"]


class Http1Response:
    """A response whose headers have arrived, behind ``UpstreamResponse``; the body is read from its
    connection, which ``release`` returns to the pool and ``close`` drops."""

    __slots__ = ("_connection", "content_type", "raw_headers", "status")

    def __init__(self, connection: Http1Connection) -> None:
        self._connection: Http1Connection | None = connection
        self.status = connection.status
        self.content_type = connection.content_type
        self.raw_headers = connection.raw_headers
        """The headers as they came, names and values in bytes."""

    @property
    def retry_after(self) -> str | None:
        """The ``Retry-After`` header (looked up only for an error: nothing on the success path)."""
        for name, value in self.raw_headers:
            if name.lower() == b"retry-after":
                return value.decode("latin-1")
        return None

    @property
    def headers(self) -> dict[str, str]:
        """The headers by lower-cased name (the last of a repeated one); built on each call."""
        return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self.raw_headers}

    def _open(self) -> Http1Connection:
        connection = self._connection
        if connection is None:
            raise UpstreamProtocolError("upstream response read after it was released or closed")
        return connection

    async def read(self) -> bytes:
        """The whole body; ``UpstreamTimeout`` past the exchange's ``total_s``."""
        connection = self._open()
        if connection.is_complete:
            return connection.take()
        parts = []
        while True:
            if connection.buffer:
                parts.append(connection.take())
            if connection.is_complete:
                return b"".join(parts)
            if connection.error is not None:
                raise connection.error
            await connection.wait(connection.deadline)

    async def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (all that is buffered at each step); UpstreamTimeout when the first
        takes over ``first_s`` (default ``idle_s``) or a later gap exceeds ``idle_s``."""
        connection = self._open()
        loop = connection.loop
        until = loop.time() + (idle_s if first_s is None else first_s)
        while True:
            if connection.buffer:
                yield connection.take()
                until = loop.time() + idle_s
            elif connection.is_complete:
                return
            elif connection.error is not None:
                raise connection.error
            else:
                await connection.wait(until)

    def close(self) -> None:
        """Drop the connection (used when a client goes away mid-stream)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def release(self) -> None:
        """Return the connection to the pool if the response came in whole and the server keeps the
        connection alive; close it otherwise."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.owner.reuse(connection)
