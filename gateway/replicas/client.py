"""The seam to upstream replicas: ``UpstreamClient`` sends a request, ``UpstreamResponse`` is its answer.

The upstream client decides the gateway's speed first, so it is a seam: the default is
``gateway.replicas.http1.Http1UpstreamClient`` (HTTP/1.1 on asyncio protocols and llhttp);
``gateway.replicas.aiohttp_client.AiohttpUpstreamClient`` does the same on aiohttp, at 5-6x the CPU per
request (``bench/upstream_client.py``), and ``gateway.replicas.memory_client`` answers from a function,
for tests. Anything with ``post``/``get`` returning an ``UpstreamResponse`` can take the seam
(``create_app(client=...)``). This module imports no HTTP library: a worker that uses the default
client never loads aiohttp (about 19 MiB).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from gateway.replicas.pools import Timeouts


class UpstreamResponse(Protocol):
    """An upstream response whose headers have arrived; the body is read or streamed after."""

    status: int
    content_type: str

    @property
    def retry_after(self) -> str | None:
        """The ``Retry-After`` header, if any (read for a 429 or 503, relayed to the client)."""
        ...

    async def read(self) -> bytes:
        """The whole body."""
        ...

    def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        """Body bytes as they arrive; UpstreamTimeout when the first takes over ``first_s`` (default
        ``idle_s``) or a later gap exceeds ``idle_s``."""
        ...

    def close(self) -> None:
        """Drop the connection (used when a client goes away mid-stream)."""
        ...

    def release(self) -> None:
        """Return the connection to the pool after the body was read completely."""
        ...


class UpstreamClient(Protocol):
    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        what: str,
        *,
        headers_s: float | None = None,
    ) -> UpstreamResponse:
        """Send ``body``; return once the response headers arrived. ``headers_s`` bounds that wait
        (default ``timeouts.first_byte_s``); ``connect_s`` bounds the connect, ``total_s`` the exchange."""
        ...

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]: ...

    async def close(self) -> None: ...
