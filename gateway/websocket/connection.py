"""``GET /v1/ws``: one WebSocket connection, many requests, each run by the same pipeline as HTTP.

::

    accept -> authenticate: the upgrade's Authorization header, or the first message's api_key
      -> read messages until the client leaves:
           request  its own task, the life an HTTP request has (gateway.lifecycle.live): the
                    key checked again, new_call -> Pipeline.run -> a frame per event as the
                    stream arrives -> call.finish -> span end and access-log line
           cancel   that request's task is cancelled: upstream closed, settled as a 499
      -> the client left: every request still open is cancelled, as an HTTP client's disconnect is

Backpressure: a request's next event is read from its upstream only once its last frame is sent,
and sending waits while the socket's write buffer is full (uvicorn pauses writing), so a slow reader
slows its upstreams and nothing queues but one frame per open request (at most
``max_requests_per_connection``). uvicorn stops reading the socket while a message waits for us.

Close codes: 4401 authentication failed (or a first message that is not a valid one while the
policy requires a key), 4408 no key within ``body_read_timeout_s``, 4429 too many failed
authentications from this client, 1013 the limits store is down under ``fail_closed``, 1011 a bug.
Anything wrong with one request (bad JSON, a bad field, a rate limit, an upstream failure) is an
error frame for that request; the connection stays open.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import msgspec

from gateway.authentication import authenticate_client
from gateway.compiled import CompiledPolicy
from gateway.errors import (
    AuthenticationFailed,
    ClientDisconnected,
    GatewayError,
    InvalidRequest,
    RateLimited,
    RequestTimeout,
    ServiceUnavailable,
)
from gateway.instance import Gateway
from gateway.lifecycle import Observer, live, new_call
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.proxy import Receive, Scope, Send
from gateway.telemetry.spans import RequestSpan
from gateway.websocket.frames import StreamFrames, error_frame, frame
from gateway.websocket.messages import ClientMessage, Kind, MessageError, mode_of_query, read_message

__all__ = ["Connection", "WebSocketEndpoint", "close_code"]

logger = logging.getLogger("sortyard.websocket")
_NO_HEADERS: dict[str, str] = {}


def close_code(error: GatewayError) -> int:
    """The close code of an error that ends a connection: its key failed, or could not be checked."""
    if isinstance(error, RateLimited):
        return 4429
    if isinstance(error, ServiceUnavailable):
        return 1013  # try again later
    if isinstance(error, RequestTimeout):
        return 4408
    return 4401


class _Closing(Exception):
    """Ends the connection: ``last`` (an error frame, when there is one) and then ``code``."""

    def __init__(self, code: int, reason: str, last: bytes | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason[:120]  # a close reason has at most 123 bytes
        self.last = last

    @classmethod
    def of(cls, error: GatewayError, last: bytes | None) -> _Closing:
        return cls(close_code(error), error.code or error.type, last)


class _Gone(Exception):
    """The connection cannot take a frame: the client left, or it is closed."""


class WebSocketEndpoint:
    """The ASGI handler of ``/v1/ws`` (``gateway.proxy.ProxyApp`` routes its WebSocket scopes here)."""

    def __init__(
        self, gateway: Gateway, observer: Observer | None = None, *, max_requests_per_connection: int = 16
    ) -> None:
        self.gateway = gateway
        self.observer = observer or Observer()
        self.max_requests_per_connection = max_requests_per_connection
        """Requests one connection may have open at once; one more gets a 429 error frame."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] == "websocket.connect":
            await Connection(self, scope, receive, send).run()


class Connection:
    """One connection: its credentials, its open requests, and the one way out (``_send``)."""

    def __init__(self, endpoint: WebSocketEndpoint, scope: Scope, receive: Receive, send: Send) -> None:
        self.gateway = endpoint.gateway
        self.observer = endpoint.observer
        self.max_requests = endpoint.max_requests_per_connection
        self._receive, self._send_asgi = receive, send
        self.headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        """The upgrade's headers; with the first message's ``api_key`` as Authorization once it came."""
        self.peer: str | None = scope["client"][0] if scope.get("client") else None
        self.default_mode = mode_of_query(scope.get("query_string", b""))
        self.span_scope = {"method": "GET", "path": scope["path"]}
        self.requests: dict[bytes, asyncio.Task[None]] = {}
        """Requests not answered yet, by their encoded id (``null`` for the one without)."""
        self._tasks: set[asyncio.Task[None]] = set()  # answered or not, until their after-response work ran
        self._cancelled: set[asyncio.Task[None]] = set()
        self._is_awaiting_key = "authorization" not in self.headers
        self._is_client_gone = False
        self._is_closed = False
        self._is_ending = False
        self._closing: _Closing | None = None
        self._lock = asyncio.Lock()  # one frame at a time, in order
        task = asyncio.current_task()
        assert task is not None
        self._task = task

    async def run(self) -> None:
        """Accept, serve messages until the client leaves or the connection must close, then cancel what
        is still open and wait for every request's after-response work."""
        await self._send_asgi({"type": "websocket.accept"})
        try:
            await self._read()
        except asyncio.CancelledError:
            if self._closing is None:  # not ours (the server is stopping)
                raise
            self._task.uncancel()
        except _Closing as closing:
            self._closing = closing
        except _Gone:  # a frame to a client that had left: the disconnect follows
            self._is_client_gone = True
        except Exception:  # a bug: the client still gets a close code
            logger.exception("unexpected error on a WebSocket connection")
            self._closing = _Closing(1011, "internal_error")
        finally:
            self._is_ending = True
            for key in list(self.requests):
                self._cancel(key)
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._closing is not None and not self._is_client_gone:
            await self._close(self._closing)

    async def _read(self) -> None:
        timeout_s: float | None = None
        if not self._is_awaiting_key:
            await self._authenticate(None)  # the upgrade's Authorization header
        elif self.gateway.compiled.policy.auth.required:
            timeout_s = self.gateway.settings.body_read_timeout_s  # the key must come in time
        while (data := await self._next_data(timeout_s)) is not None:
            timeout_s = None
            await self._on_data(data)

    async def _next_data(self, timeout_s: float | None) -> str | bytes | None:
        """The next message's text (or bytes); None once the client has left."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    message = await self._receive()
                    if message["type"] == "websocket.disconnect":
                        self._is_client_gone = True
                        return None
                    data = message.get("text")
                    if data is None:
                        data = message.get("bytes")
                    if data is not None:
                        return data
        except TimeoutError:
            error = RequestTimeout(
                f'No API key arrived within {timeout_s:g} seconds: send {{"type": "auth", "api_key": ...}} '
                "first, or the Authorization header with the upgrade."
            )
            raise _Closing.of(error, error_frame(None, error)) from None

    async def _on_data(self, data: str | bytes) -> None:
        is_first, self._is_awaiting_key = self._is_awaiting_key, False
        try:
            message = read_message(data, self.default_mode)
        except MessageError as bad:
            if is_first and self.gateway.compiled.policy.auth.required:
                raise _Closing(4401, "invalid_api_key", error_frame(bad.id, bad.error)) from None
            await self._send(error_frame(bad.id, bad.error))
            return
        if is_first:
            if message.api_key is not None or self.gateway.compiled.policy.auth.required:
                await self._authenticate(message)
        elif message.api_key is not None:
            error = InvalidRequest(
                "The connection is already authenticated: 'api_key' goes in its first message only.",
                param="api_key",
                code="invalid_value",
            )
            await self._send(error_frame(message.id, error))
            return
        if message.kind is Kind.AUTH:
            await self._send(frame(message.id, {"authenticated": "authorization" in self.headers}))
        elif message.kind is Kind.CANCEL:
            key = msgspec.json.encode(message.id)
            if key in self.requests:  # else it was answered already: nothing to cancel
                self._cancel(key)
                await self._send(frame(message.id, {"done": True, "cancelled": True}))
        else:
            await self._start(message)

    async def _authenticate(self, message: ClientMessage | None) -> None:
        """The connection's key, checked (and a failure counted against the client) as HTTP's are."""
        if message is not None and message.api_key is not None:
            self.headers = {**self.headers, "authorization": f"Bearer {message.api_key}"}
        try:
            gateway = self.gateway
            await authenticate_client(
                gateway.compiled, self.headers, self.peer, gateway.clients, gateway.keys
            )
        except GatewayError as error:
            raise _Closing.of(error, error_frame(message.id if message else None, error)) from None

    async def _start(self, message: ClientMessage) -> None:
        key = msgspec.json.encode(message.id)
        error: GatewayError | None = None
        if key in self.requests:
            error = InvalidRequest(
                "A request with this id is still open: give concurrent requests distinct ids.",
                param="id",
                code="duplicate_id",
            )
        elif len(self.requests) >= self.max_requests:
            error = RateLimited(
                f"Too many requests open on this connection (at most {self.max_requests}).",
                code="too_many_open_requests",
            )
        if error is not None:
            await self._send(error_frame(message.id, error))
            return
        task = asyncio.get_running_loop().create_task(self._serve(message, key))
        self.requests[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _cancel(self, key: bytes) -> None:
        task = self.requests.pop(key)
        self._cancelled.add(task)
        task.cancel()

    def answered(self, key: bytes) -> None:
        """From here on the request is not cancelled: its last frame is being sent, or it ended."""
        if self.requests.get(key) is asyncio.current_task():
            del self.requests[key]

    async def _serve(self, message: ClientMessage, key: bytes) -> None:
        """One request, from its message to its last frame and after-response work: the life an HTTP
        request has (``gateway.lifecycle.live``)."""
        await live(self.gateway, self.observer, _MessageExchange(self, message, key))

    async def relay(
        self, events: AsyncIterator[bytes], frames: StreamFrames, key: bytes, request_id: str
    ) -> None:
        """The stream as frames; the next event is read only once the last frame has gone out."""
        try:
            async for chunk in events:
                for each in frames.feed(chunk):
                    await self._send(each)
            self.answered(key)
            await self._send(frames.last(request_id))
        finally:
            self.answered(key)  # not cancelled from here on: closing the upstream and settling must run
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()  # closes the upstream connection if the stream did not finish

    def absorb(self) -> bool:
        """In an ``except CancelledError``: True (and the cancellation undone) when the connection
        cancelled this request (a cancel message, the client gone, the connection closing)."""
        task = asyncio.current_task()
        if task is None or task not in self._cancelled:
            return False
        self._cancelled.discard(task)
        task.uncancel()
        return True

    def close_soon(self, closing: _Closing) -> None:
        """End the connection from a request's task: the reader stops, then ``run`` closes it."""
        if self._closing is None and not self._is_ending:
            self._closing = closing
            self._task.cancel()

    async def _send(self, data: bytes) -> None:
        """One frame; waits while the socket cannot take more (the backpressure)."""
        async with self._lock:
            if self._is_closed:
                raise _Gone("the WebSocket is closed")
            try:
                await self._send_asgi({"type": "websocket.send", "text": data.decode("utf-8", "replace")})
            except OSError as error:  # uvicorn's ClientDisconnected
                raise _Gone("the client left") from error

    async def send_quietly(self, data: bytes) -> None:
        try:
            await self._send(data)
        except _Gone:  # the client left: the reader cancels the rest
            pass

    async def _close(self, closing: _Closing) -> None:
        if closing.last is not None:
            await self.send_quietly(closing.last)
        async with self._lock:
            if self._is_closed:
                return
            self._is_closed = True
            try:
                await self._send_asgi(
                    {"type": "websocket.close", "code": closing.code, "reason": closing.reason}
                )
            except OSError:
                pass


class _MessageExchange:
    """One request message's arrival and answer (``gateway.lifecycle.Exchange``): the connection's
    headers and key, the stream as frames, an error as an error frame."""

    endpoint = Endpoint.CHAT

    def __init__(self, connection: Connection, message: ClientMessage, key: bytes) -> None:
        self.connection = connection
        self.message = message
        self.key = key
        self.headers = connection.headers
        self.id_headers = _NO_HEADERS  # each request its own id: leases and logs are per request
        self.scope = connection.span_scope
        self.frames = StreamFrames(message.id, message.mode)
        self._request_id: str | None = None

    async def open(self, compiled: CompiledPolicy, request_id: str, span: RequestSpan | None) -> Call:
        connection, gateway = self.connection, self.connection.gateway
        self._request_id = request_id
        # checked again for each request: a reload may have revoked the connection's key
        peer = connection.peer
        key = await authenticate_client(compiled, self.headers, peer, gateway.clients, gateway.keys)
        call = new_call(
            Endpoint.CHAT,
            self.headers,
            self.message.body,
            compiled,
            request_id,
            time.perf_counter(),
            key=key,
            span=span,
            peer=peer,
        )
        # the done frame carries the usage: asked for always (the upstream stage asks anyway)
        self.frames.keep_usage_chunk, call.include_usage = call.include_usage, True
        return call

    async def deliver(self, call: Call, result: BytesResult | StreamResult) -> int:
        if not isinstance(result, StreamResult):  # stream is always on: a bug
            raise GatewayError("The answer was not a stream.")
        try:
            await self.connection.relay(result.events, self.frames, self.key, call.request_id)
        except _Gone:  # the socket went away under a frame
            call.error = ClientDisconnected("The client closed the connection.")
            return call.error.status
        return result.status

    async def refuse(self, call: Call | None, error: GatewayError) -> None:
        connection = self.connection
        connection.answered(self.key)
        if isinstance(error, ClientDisconnected):
            return  # nobody is listening
        await connection.send_quietly(error_frame(self.message.id, error, self._request_id if call else None))
        if isinstance(error, AuthenticationFailed):  # the key stopped working (a reload)
            connection.close_soon(_Closing.of(error, None))

    def is_client_gone(self) -> bool:
        return self.connection.absorb()

    def close(self) -> None:
        self.connection.answered(self.key)
