"""uvicorn's httptools protocol with a deadline on request headers and OpenAI-shaped protocol errors.

uvicorn bounds idle keep-alive connections but not a client that sends half a request line and
waits (slowloris): such a connection holds a worker's socket for as long as the client likes. Here a
request's headers must be complete within ``header_read_timeout_s`` of the connection opening (or, on
a kept-alive connection, of the request's first byte); otherwise the client gets an OpenAI-shaped 408
and the connection is closed. The body has its own deadline in ``gateway.proxy.read_body``. A request
httptools cannot parse (a bad chunk size, both Content-Length and Transfer-Encoding, control bytes in
a header) gets the same shape: a 400 ``invalid_http_request`` instead of uvicorn's plain-text page.

Each request gets a ``RequestHook`` (``scope["sortyard.request"]``): the connection fires it when it
is lost before the response is complete, so the app watches for a disconnect without a task per
request reading ``receive()``; and the app can hold a response's writes so that its head and first
body part leave in one system call.

uvicorn takes a protocol class or an import string (``gateway.http_protocol:GuardedHttpToolsProtocol``,
what worker processes use: they read the timeout from the environment like the rest of the settings).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import GatewayError, InvalidRequest, RequestTimeout, render
from gateway.settings import Settings

REASONS = {400: "Bad Request", 408: "Request Timeout"}


def error_response(error: GatewayError) -> bytes:
    """A whole HTTP/1.1 response carrying ``error`` in the OpenAI shape; the connection then closes."""
    status, body, _ = render(error)
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


REQUEST_HOOK = "sortyard.request"
"""The scope key of a request's ``RequestHook`` (only under ``GuardedHttpToolsProtocol``)."""


class RequestHook:
    """One request's line to its connection: told when the client goes, and able to hold the response's
    writes so its head and first body part leave in one ``write``.

    It is the request's transport as uvicorn's cycle sees it (``write``, ``close``, ``is_closing``), so
    holding needs nothing of uvicorn but that attribute. A response sent as a start message then a body
    message is otherwise two writes, two system calls: on a proxied request of a few hundred
    microseconds, one is a few percent of its CPU.
    """

    __slots__ = ("_held", "callback", "is_body_complete", "is_fired", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.callback: Callable[[], None] | None = None
        """What to call when the client goes (the app sets it while it cares)."""
        self.is_fired = False
        self.is_body_complete = False
        """The whole request body has arrived (the app need not wait for it)."""
        self._held: list[bytes] | None = None

    def fire(self) -> None:
        """The connection was lost before the response was complete."""
        self.is_fired = True
        if self.callback is not None:
            self.callback()

    def hold(self) -> None:
        """Keep what the response writes from now on until ``release``."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Write what was held, in one call, and write through from now on."""
        held, self._held = self._held, None
        if held:
            self.transport.write(held[0] if len(held) == 1 else b"".join(held))

    # the transport, as uvicorn's RequestResponseCycle uses it

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        else:
            self.transport.write(data)

    def close(self) -> None:
        self.release()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that answers 408 and closes a connection whose request headers are too slow,
    and answers what it cannot parse with an OpenAI-shaped 400."""

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

    def shutdown(self) -> None:
        """The server is stopping: an idle TLS connection is dropped at once. Closing it would send
        close_notify and wait for the client's, which a client idling in its keep-alive pool never
        sends, so the stop would take the whole drain timeout; with nothing in flight, dropping it
        loses nothing (the client's next request opens a new connection). Plain connections close."""
        idle = self.cycle is None or self.cycle.response_complete
        if idle and self.transport.get_extra_info("sslcontext") is not None:
            self.transport.abort()
            return
        super().shutdown()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()  # the next request on a kept-alive connection: its headers are on the clock again

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None:  # its task has not run yet: the hook is there when the app looks
            hook = RequestHook(self.transport)
            cycle.scope[REQUEST_HOOK] = hook  # type: ignore[literal-required]
            cycle.transport = hook  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        hook = self.cycle.transport if self.cycle is not None else None
        if isinstance(hook, RequestHook):
            hook.is_body_complete = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and not cycle.response_complete:
            hook = cycle.scope.get(REQUEST_HOOK)
            if isinstance(hook, RequestHook):
                hook.fire()

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
            message = f"The request headers did not arrive within {self._timeout_s():g} seconds."
            self.transport.write(error_response(RequestTimeout(message)))
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """What httptools could not parse, answered in the OpenAI shape (uvicorn's own is plain text)."""
        error = InvalidRequest(
            "The request is not valid HTTP/1.1 (its framing or headers could not be parsed).",
            code="invalid_http_request",
        )
        self.transport.write(error_response(error))
        self.transport.close()


def guarded_protocol(header_read_timeout_s: float) -> type[GuardedHttpToolsProtocol]:
    """The protocol class with an explicit header deadline (one process, settings already read)."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_read_timeout_s": header_read_timeout_s},
    )
