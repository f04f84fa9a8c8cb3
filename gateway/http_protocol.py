"""uvicorn's httptools protocol with a deadline on request headers.

uvicorn bounds idle keep-alive connections but not a client that sends half a request line and
waits (slowloris): such a connection holds a worker's socket for as long as the client likes. Here a
request's headers must be complete within ``header_read_timeout_s`` of the connection opening (or, on
a kept-alive connection, of the request's first byte); otherwise the client gets an OpenAI-shaped 408
and the connection is closed. The body has its own deadline in ``gateway.proxy.read_body``.

uvicorn takes a protocol class or an import string (``gateway.http_protocol:GuardedHttpToolsProtocol``,
what worker processes use: they read the timeout from the environment like the rest of the settings).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import RequestTimeout, render
from gateway.settings import Settings


def _timeout_response(timeout_s: float) -> bytes:
    status, body, _ = render(
        RequestTimeout(f"The request headers did not arrive within {timeout_s:g} seconds.")
    )
    head = (
        f"HTTP/1.1 {status} Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that answers 408 and closes a connection whose request headers are too slow."""

    header_read_timeout_s: float | None = None
    """Seconds a request's headers may take; None: read once from the environment (``Settings``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    @classmethod
    def _timeout_s(cls) -> float:
        if cls.header_read_timeout_s is None:  # once per process (each worker reads its environment)
            cls.header_read_timeout_s = Settings.from_env().header_read_timeout_s
        return cls.header_read_timeout_s

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()  # the next request on a kept-alive connection: its headers are on the clock again

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self._timeout_s(), self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm()  # a pipelined request behind a response still being sent: not ours to cut
            return
        if not self.transport.is_closing():
            self.transport.write(_timeout_response(self._timeout_s()))
            self.transport.close()


def guarded_protocol(header_read_timeout_s: float) -> type[GuardedHttpToolsProtocol]:
    """The protocol class with an explicit header deadline (one process, settings already read)."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_read_timeout_s": header_read_timeout_s},
    )
