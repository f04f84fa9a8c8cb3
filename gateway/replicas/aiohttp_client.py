"""The upstream client on aiohttp: one ``aiohttp.ClientSession`` with a pooled keep-alive connector.

The alternative to the default ``gateway.replicas.http1.Http1UpstreamClient``, behind the same seam
(``gateway.replicas.client``): kept for comparison (``bench/upstream_client.py``) and for the in-memory
test client's error mapping. Foreign errors are translated in one place, :func:`map_client_errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamProtocolError, UpstreamTimeout
from gateway.replicas.client import UpstreamResponse
from gateway.replicas.pools import Timeouts

__all__ = ["AiohttpUpstreamClient", "AiohttpUpstreamResponse", "map_client_errors"]


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


class AiohttpUpstreamResponse:
    """An aiohttp response behind ``UpstreamResponse``."""

    def __init__(self, response: aiohttp.ClientResponse, what: str) -> None:
        self._response = response
        self.what = what
        self.status = response.status
        self.content_type = response.headers.get("Content-Type", "")

    @property
    def retry_after(self) -> str | None:
        return self._response.headers.get("Retry-After")

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


class AiohttpUpstreamClient:
    """The aiohttp client: one ``aiohttp.ClientSession`` with a pooled keep-alive connector (the default
    before ``Http1UpstreamClient``; kept for comparison)."""

    def __init__(self, *, max_connections: int = 1024, keepalive_s: float = 4.0) -> None:
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
