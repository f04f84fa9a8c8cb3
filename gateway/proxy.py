"""The hot path's HTTP side: a proxied API request from ASGI in to the last byte out.

``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/responses`` and the
policy's pass-through routes skip the web framework's routing, request and response objects (a
measurable share of a ~0.3 ms request on one core). Each is an ``HttpExchange`` that
``gateway.lifecycle.live`` runs, the same life a WebSocket request has::

    authenticate from the headers (a caller without a valid key never has a byte of its body read)
    -> read the body (bounded by the policy) -> decode it into a ``Call`` -> the pipeline -> send
    bytes (compressed when the policy and the client say so) or relay the stream

WebSocket paths (``/v1/ws``, ``gateway.websocket``) go to the handlers ``ProxyApp`` is given; every
other path goes to the Litestar app (``gateway.routes``). The client is watched from the moment the
body is read: when it disconnects, the request is cancelled at once, which closes the upstream
connection and settles the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from gateway.authentication import authenticate_client
from gateway.compiled import CompiledPolicy
from gateway.compression import Compressor
from gateway.errors import (
    BodyTooLarge,
    ClientDisconnected,
    GatewayError,
    MethodNotAllowed,
    RequestTimeout,
    render,
)
from gateway.http_protocol import REQUEST_HOOK, RequestHook
from gateway.instance import Gateway
from gateway.lifecycle import Observer, live, new_call
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.telemetry.spans import RequestSpan

if TYPE_CHECKING:
    from litestar import Litestar

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIHandler = Callable[[Scope, Receive, Send], Awaitable[None]]
ExchangeFactory = Callable[["Gateway", Scope, Receive, Send], "HttpExchange"]

ROUTES: dict[str, Endpoint] = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
    "/v1/responses": Endpoint.RESPONSES,
}
_JSON = b"application/json"
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class ProxyApp:
    """The ASGI app uvicorn serves: the proxied endpoints here, WebSocket paths in ``websockets``'
    handlers, the rest in Litestar."""

    def __init__(
        self,
        gateway: Gateway,
        litestar: Litestar,
        observer: Observer | None = None,
        *,
        websockets: Mapping[str, ASGIHandler] | None = None,
        exchanges: Mapping[str, ExchangeFactory] | None = None,
    ) -> None:
        self.gateway = gateway
        self.litestar = litestar
        self.observer = observer or Observer()
        self.websockets = dict(websockets or {})
        """WebSocket handlers by path (``/v1/ws``: ``gateway.websocket``)."""
        self.exchanges = dict(exchanges or {})
        """Other wire formats on the hot path, by path (``/v1/messages``: ``gateway.anthropic``): an
        ``HttpExchange`` of their own that translates at the edge."""

    @property
    def state(self) -> Any:
        return self.litestar.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            make = self.exchanges.get(scope["path"])
            if make is not None:
                await live(self.gateway, self.observer, make(self.gateway, scope, receive, send))
                return
            endpoint = ROUTES.get(scope["path"])
            if endpoint is None and scope["path"] in self.gateway.compiled.passthrough_paths:
                endpoint = Endpoint.PASSTHROUGH  # a pool's own route (policy: passthrough_routes)
            if endpoint is not None:
                await live(
                    self.gateway, self.observer, HttpExchange(self.gateway, endpoint, scope, receive, send)
                )
                return
        elif scope["type"] == "websocket":
            handler = self.websockets.get(scope["path"])
            if handler is not None:
                await handler(scope, receive, send)
                return
        await self.litestar(scope, receive, send)  # type: ignore[arg-type]


async def read_body(
    receive: Receive,
    headers: Mapping[str, str],
    limit: int,
    timeout_s: float = 30.0,
    *,
    is_complete: bool = False,
) -> bytes:
    """The whole request body; BodyTooLarge as soon as it passes ``limit`` (declared or not),
    RequestTimeout (the connection then closes) when it has not all arrived within ``timeout_s``.
    ``is_complete``: the server has the whole body already (nothing to wait for, so no timer)."""
    if is_complete:
        return await _read_body(receive, headers, limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(receive, headers, limit)
    except TimeoutError:
        raise RequestTimeout(
            f"The request body did not arrive within {timeout_s:g} seconds.", headers={"Connection": "close"}
        ) from None


async def _read_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"Request body of {declared} bytes is over the limit of {limit} bytes.")
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > limit:
            raise BodyTooLarge(f"Request body is over the limit of {limit} bytes.")
        return body  # the common case: one message
    parts = [body]
    size = len(body)
    while message.get("more_body"):
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"Request body is over the limit of {limit} bytes.")
        parts.append(chunk)
    return b"".join(parts)


def _header_list(request_id: str, call: Call | None, extra: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    headers = [(b"x-request-id", request_id.encode())]
    if call is not None:
        if call.pool is not None:
            headers.append((b"x-sortyard-pool", call.pool.encode()))
        for name, value in call.response_headers.items():
            headers.append((name.lower().encode(), value.encode("latin-1")))
    for name, value in extra.items():
        headers.append((name.lower().encode(), value.encode("latin-1")))
    return headers


async def _send_bytes(
    send: Send,
    status: int,
    content_type: bytes,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    compressor: Compressor | None = None,
    accept_encoding: str | None = None,
    hook: RequestHook | None = None,
) -> None:
    """A complete response (result or error), compressed when the policy and Accept-Encoding say so;
    its head and body in one write when the connection has a ``hook``."""
    if compressor is not None:
        body = await compressor.encode(body, accept_encoding, headers)
    headers.append((b"content-type", content_type))
    headers.append((b"content-length", str(len(body)).encode()))
    if hook is None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return
    hook.hold()
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
    finally:
        hook.release()


class ClientWatch:
    """Cancels the task serving a request when its client disconnects, from the moment the body has been
    read until ``stop()``: a plain request's upstream call is aborted as promptly as a stream's relay
    (the engine stops generating for nobody). Stopped before the last byte is sent, because the server
    reports a finished response as a disconnect too.

    Under ``GuardedHttpToolsProtocol`` the connection says so itself (its ``RequestHook``); under
    another server a task waits for ``http.disconnect`` on ``receive``."""

    def __init__(self, receive: Receive, scope: Scope) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.is_client_gone = False
        self._is_stopped = False
        self._watcher: asyncio.Task[None] | None = None
        self._hook: RequestHook | None = scope.get(REQUEST_HOOK)
        if self._hook is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        elif self._hook.is_fired:  # gone while the body was read
            self._client_left()
        else:
            self._hook.callback = self._client_left

    def _client_left(self) -> None:
        if not self._is_stopped:
            self.is_client_gone = True
            self.task.cancel()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._client_left()
                return

    def stop(self) -> None:
        if not self._is_stopped:
            self._is_stopped = True
            if self._hook is not None:
                self._hook.callback = None
            if self._watcher is not None:
                self._watcher.cancel()

    def absorb(self) -> bool:
        """In an ``except CancelledError``: True (and the cancellation undone) when it was ours, for a
        client that left; False when someone else cancelled the task (then re-raise)."""
        if not self.is_client_gone:
            return False
        self.task.uncancel()
        return True


_NOT_READ = object()


class HttpExchange:
    """One HTTP request's arrival and answer (``gateway.lifecycle.Exchange``)."""

    def __init__(
        self, gateway: Gateway, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send
    ) -> None:
        self.gateway = gateway
        self.endpoint = endpoint
        self.scope = scope
        self.headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        self.id_headers = self.headers
        self._receive, self._send = receive, send
        self._watch: ClientWatch | None = None
        self._hook: RequestHook | None = scope.get(REQUEST_HOOK)
        self._request_id = ""

    async def open(self, compiled: CompiledPolicy, request_id: str, span: RequestSpan | None) -> Call:
        self._request_id = request_id
        scope, headers, gateway = self.scope, self.headers, self.gateway
        if scope["method"] != "POST":
            raise MethodNotAllowed(
                f"Method {scope['method']} is not allowed for {scope['path']}.", headers={"Allow": "POST"}
            )
        peer = scope["client"][0] if scope.get("client") else None
        # who is calling, before the body: a caller without a valid key never has its body read
        key = await authenticate_client(compiled, headers, peer, gateway.clients, gateway.keys)
        settings = gateway.settings
        # the policy's limit: a declared length over it gets 413 before the body, a growing one is cut
        limit = min(settings.hard_max_body_bytes, compiled.policy.limits.max_body_bytes)
        is_complete = self._hook is not None and self._hook.is_body_complete
        raw = await read_body(
            self._receive, headers, limit, settings.body_read_timeout_s, is_complete=is_complete
        )
        self._watch = ClientWatch(self._receive, scope)
        return new_call(
            self.endpoint,
            headers,
            self.request_body(raw),
            compiled,
            request_id,
            time.perf_counter(),
            key=key,
            span=span,
            peer=peer,
            path=scope["path"],
        )

    def request_body(self, raw: bytes) -> bytes:
        """The body the pipeline decodes: the request's own (a subclass for another wire format gives
        the OpenAI request it means)."""
        return raw

    def render(self, error: GatewayError) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, extra headers) of an error: OpenAI's shape (a subclass gives its format's)."""
        return render(error)

    async def deliver(self, call: Call, result: BytesResult | StreamResult) -> int:
        if isinstance(result, BytesResult):
            self.close()
            await _send_bytes(
                self._send,
                result.status,
                result.content_type.encode(),
                result.body,
                _header_list(call.request_id, call, {}),
                call.compiled.compression,
                self.headers.get("accept-encoding"),
                self._hook,
            )
            return result.status
        assert self._watch is not None
        headers = _header_list(call.request_id, call, {})
        return await _send_stream(call, result, headers, self._watch, self._send, self._hook)

    async def refuse(self, call: Call | None, error: GatewayError) -> None:
        if isinstance(error, ClientDisconnected):
            return  # nobody is listening
        self.close()
        status, body, extra = self.render(error)
        if self._watch is None and _has_body(self.headers):  # refused before its body was read:
            extra = {**extra, "Connection": "close"}  # don't let the client send the rest for nothing
        compiled = call.compiled if call is not None else self.gateway.compiled
        request_id = call.request_id if call is not None else self._request_id
        sent = _header_list(request_id, call, extra)
        encoding = self.headers.get("accept-encoding")
        await _send_bytes(self._send, status, _JSON, body, sent, compiled.compression, encoding, self._hook)

    def is_client_gone(self) -> bool:
        return self._watch is not None and self._watch.absorb()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.stop()


def _has_body(headers: Mapping[str, str]) -> bool:
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


async def _send_stream(
    call: Call,
    result: StreamResult,
    headers: list[tuple[bytes, bytes]],
    watch: ClientWatch,
    send: Send,
    hook: RequestHook | None = None,
) -> int:
    """Relay a stream (its head and first events in one write when the connection has a ``hook``); a
    client disconnect cancels the relay at once (``watch``): then 499, recorded on the call (the client
    saw the 200 and a cut stream)."""
    events = result.events
    status = result.status
    if hook is not None:
        hook.hold()
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers + _SSE_HEADERS})
        async for chunk in events:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if hook is not None:
                hook.release()  # the head and the first events: once; later, a no-op
        watch.stop()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not watch.absorb():
            raise
        call.error = ClientDisconnected("The client closed the connection during the stream.")
        status = call.error.status
    finally:
        if hook is not None:
            hook.release()
        watch.stop()
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()  # closes the upstream connection if the relay did not finish
    return status
