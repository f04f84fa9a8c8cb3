"""The HTTP client that talks to upstream replicas: one pooled keep-alive session per process.

It is aiohttp rather than httpx because the upstream client decides the gateway's speed first: on
the overhead harness a bare forwarder made 634 req/s with ``httpx.AsyncClient``, 2,040 with httpx on
an aiohttp transport and 3,540 with ``aiohttp.ClientSession`` (../shared/FACTS.md). The seam is
``UpstreamClient``: anything with ``post``/``get`` returning an ``UpstreamResponse`` can replace it.

Foreign errors are translated in one place, :func:`map_client_errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Protocol

import aiohttp

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamProtocolError, UpstreamTimeout
from gateway.replicas.pools import Timeouts


@contextmanager
def map_client_errors(what: str) -> Iterator[None]:
    """Translate aiohttp and timeout errors into the gateway's error tree."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError:  # never reached the replica: a connect failure, not a slow answer
        raise UpstreamConnectError(f"{what}: cannot connect (timed out)") from None
    except TimeoutError:
        raise UpstreamTimeout(f"{what}: timed out") from None
    except aiohttp.ClientConnectorError as e:
        raise UpstreamConnectError(f"{what}: cannot connect ({e.os_error.strerror or e})") from None
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientResponseError) as e:
        raise UpstreamProtocolError(f"{what}: broken response ({type(e).__name__})") from None
    except aiohttp.ClientError as e:
        raise UpstreamError(f"{what}: {type(e).__name__}") from None


class UpstreamResponse(Protocol):
    """An upstream response whose headers have arrived; the body is read or streamed after."""

    status: int
    content_type: str

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


class AiohttpUpstreamResponse:
    """An aiohttp response behind ``UpstreamResponse``."""

    def __init__(self, response: aiohttp.ClientResponse, what: str) -> None:
        self._response = response
        self.what = what
        self.status = response.status
        self.content_type = response.headers.get("Content-Type", "")

    async def read(self) -> bytes:
        with map_client_errors(self.what):
            return await self._response.read()

    async def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        """Body bytes as they arrive; UpstreamTimeout when the first takes over ``first_s`` (default
        ``idle_s``) or a later gap exceeds ``idle_s``."""
        content = self._response.content
        loop = asyncio.get_running_loop()
        with map_client_errors(self.what):
            async with asyncio.timeout_at(loop.time() + (idle_s if first_s is None else first_s)) as deadline:
                while True:
                    chunk = await content.readany()
                    if not chunk:
                        return
                    yield chunk
                    deadline.reschedule(loop.time() + idle_s)

    def close(self) -> None:
        """Drop the connection (used when a client goes away mid-stream)."""
        self._response.close()

    def release(self) -> None:
        """Return the connection to the pool after the body was read completely."""
        self._response.release()


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


class AiohttpUpstreamClient:
    """The default client: one ``aiohttp.ClientSession`` with a pooled keep-alive connector."""

    def __init__(self, *, max_connections: int = 1024, keepalive_s: float = 30.0) -> None:
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[Timeouts, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self.max_connections, keepalive_timeout=self.keepalive_s, ttl_dns_cache=300
        )
        # upstream bodies pass through untouched: ask for identity encoding, never decompress
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
            headers={"Accept-Encoding": "identity"},
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self._open()
        return self._session

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
        timeout = self._timeouts.get(timeouts)
        if timeout is None:  # one per policy timeouts object, not one per request
            timeout = aiohttp.ClientTimeout(total=timeouts.total_s, sock_connect=timeouts.connect_s)
            self._timeouts[timeouts] = timeout
        with map_client_errors(what):
            async with asyncio.timeout(timeouts.first_byte_s if headers_s is None else headers_s):
                response = await self.session.post(url, data=body, headers=headers, timeout=timeout)
        return AiohttpUpstreamResponse(response, what)

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        with map_client_errors(url):
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                return response.status, await response.read()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
