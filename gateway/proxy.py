"""The hot path, and its one owner: a proxied API request from ASGI in to the last byte out.

``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/responses`` and the
policy's pass-through routes skip the web framework's routing, request and response objects (a
measurable share of a ~0.3 ms request on one core) and are served here, top to bottom in :func:`serve`::

    start the span (when sampled) -> read the body (bounded) -> decode it into a ``Call`` under the
    compiled policy -> run the pipeline -> send bytes (compressed when the policy and the client
    say so) or relay the stream -> finish the call (its after-response work) -> end the span, write
    the access-log line

WebSocket paths (``/v1/ws``, ``gateway.websocket``) go to the handlers ``ProxyApp`` is given; every
other path goes to the Litestar app (``gateway.routes``). The client is watched from the
moment the body is read: when it disconnects, the request is cancelled at once, which closes the
upstream connection and settles the call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from gateway.compiled import CompiledPolicy
from gateway.compression import Compressor
from gateway.errors import (
    BodyTooLarge,
    ClientDisconnected,
    GatewayError,
    MethodNotAllowed,
    RequestTimeout,
    render,
    status_of,
)
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.runtime import Gateway
from gateway.schemas import parse_body, stream_flags
from gateway.telemetry.access_log import AccessLog
from gateway.telemetry.spans import RequestSpan
from gateway.telemetry.tracing import GatewayTracer

if TYPE_CHECKING:
    from litestar import Litestar

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIHandler = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("sortyard.proxy")

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


class Observer:
    """What watches each proxied request: its trace (when sampled) and its access-log line."""

    def __init__(self, tracer: GatewayTracer | None = None, access_log: AccessLog | None = None) -> None:
        self.tracer = tracer or GatewayTracer.from_env()
        self._access_log = access_log

    @property
    def access_log(self) -> AccessLog:
        if self._access_log is None:  # built on first use: no stdout buffer when logs are off
            self._access_log = AccessLog()
        return self._access_log

    def start(self, compiled: CompiledPolicy, headers: Mapping[str, str], scope: Scope) -> RequestSpan | None:
        """The request's span, when tracing is on and the request is sampled."""
        if not self.tracer.enabled:
            return None
        return self.tracer.start_request(headers, scope["method"], scope["path"], compiled.telemetry)

    def finish(
        self,
        compiled: CompiledPolicy,
        span: RequestSpan | None,
        endpoint: Endpoint,
        request_id: str,
        status: int,
        started_at: float,
        call: Call | None,
        error: GatewayError | None,
    ) -> None:
        """The request is over: end its span and write its access-log line."""
        trace_id = None
        if span is not None:
            trace_id = span.trace_id
            span.finish(call, status, error)
        if compiled.telemetry.access_log:
            self.access_log.write(endpoint.operation, request_id, status, started_at, call, error, trace_id)


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
    ) -> None:
        self.gateway = gateway
        self.litestar = litestar
        self.observer = observer or Observer()
        self.websockets = dict(websockets or {})
        """WebSocket handlers by path (``/v1/ws``: ``gateway.websocket``)."""

    @property
    def state(self) -> Any:
        return self.litestar.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            endpoint = ROUTES.get(scope["path"])
            if endpoint is None and scope["path"] in self.gateway.compiled.passthrough_paths:
                endpoint = Endpoint.PASSTHROUGH  # a pool's own route (policy: passthrough_routes)
            if endpoint is not None:
                await serve(self.gateway, endpoint, scope, receive, send, self.observer)
                return
        elif scope["type"] == "websocket":
            handler = self.websockets.get(scope["path"])
            if handler is not None:
                await handler(scope, receive, send)
                return
        await self.litestar(scope, receive, send)  # type: ignore[arg-type]


async def read_body(
    receive: Receive, headers: Mapping[str, str], limit: int, timeout_s: float = 30.0
) -> bytes:
    """The whole request body; BodyTooLarge as soon as it passes ``limit`` (declared or not),
    RequestTimeout (the connection then closes) when it has not all arrived within ``timeout_s``."""
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
) -> None:
    """A complete response (result or error), compressed when the policy and Accept-Encoding say so."""
    if compressor is not None:
        body = await compressor.encode(body, accept_encoding, headers)
    headers.append((b"content-type", content_type))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ClientWatch:
    """Cancels the task serving a request when its client disconnects, from the moment the body has been
    read until ``stop()``: a plain request's upstream call is aborted as promptly as a stream's relay
    (the engine stops generating for nobody). Stopped before the last byte is sent, because the server
    reports a finished response as a disconnect too."""

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.is_client_gone = False
        self._is_stopped = False
        self._watcher = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self._is_stopped:
                    self.is_client_gone = True
                    self.task.cancel()
                return

    def stop(self) -> None:
        if not self._is_stopped:
            self._is_stopped = True
            self._watcher.cancel()

    def absorb(self) -> bool:
        """In an ``except CancelledError``: True (and the cancellation undone) when it was ours, for a
        client that left; False when someone else cancelled the task (then re-raise)."""
        if not self.is_client_gone:
            return False
        self.task.uncancel()
        return True


def new_call(
    endpoint: Endpoint,
    headers: Mapping[str, str],
    raw: bytes,
    compiled: CompiledPolicy,
    request_id: str,
    started_at: float,
    span: RequestSpan | None = None,
    peer: str | None = None,
    path: str | None = None,
) -> Call:
    """Decode one request body into a ``Call`` under ``compiled``; a GatewayError (400, 413) when the
    body is too large for the policy or not a valid request."""
    limit = compiled.policy.limits.max_body_bytes
    if len(raw) > limit:
        raise BodyTooLarge(f"Request body is over the limit of {limit} bytes.")
    body, parsed = parse_body(endpoint, raw)
    is_stream, include_usage = stream_flags(parsed)
    return Call(
        endpoint,
        body,
        headers,
        compiled,
        request_id,
        parsed.model,
        is_stream=is_stream,
        include_usage=include_usage,
        started_at=started_at,
        span=span,
        peer=peer,
        path=path,
    )


async def serve(
    gateway: Gateway,
    endpoint: Endpoint,
    scope: Scope,
    receive: Receive,
    send: Send,
    observer: Observer | None = None,
) -> None:
    """One proxied request, from ASGI scope to the last byte sent."""
    started_at = time.perf_counter()
    gateway.inflight.enter()  # until the last finisher has run (gateway.inflight)
    compiled = gateway.compiled  # the policy this request runs under, whatever reloads meanwhile
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    request_id = gateway.request_id(headers)
    span = observer.start(compiled, headers, scope) if observer is not None else None
    call: Call | None = None
    outcome: BytesResult | StreamResult | GatewayError | None = None
    watch: ClientWatch | None = None
    status = 500
    try:
        try:
            if scope["method"] != "POST":
                raise MethodNotAllowed(
                    f"Method {scope['method']} is not allowed for {scope['path']}.", headers={"Allow": "POST"}
                )
            settings = gateway.settings
            # the policy's limit: a declared length over it gets 413 before the body, a growing one is cut
            limit = min(settings.hard_max_body_bytes, compiled.policy.limits.max_body_bytes)
            raw = await read_body(receive, headers, limit, settings.body_read_timeout_s)
            watch = ClientWatch(receive)
            try:
                peer = scope["client"][0] if scope.get("client") else None
                path, now = scope["path"], time.perf_counter()
                call = new_call(endpoint, headers, raw, compiled, request_id, now, span, peer, path)
            except GatewayError as error:
                gateway.metrics.count_request(endpoint.name.lower(), "-", status_of(error))
                raise
            outcome = await gateway.pipeline.run(call)
        except GatewayError as error:
            outcome = error
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise
            outcome = ClientDisconnected("The client closed the connection before the response.")
        except Exception as error:  # a bug: still OpenAI-shaped, never a bare 500 page
            logger.exception("unexpected error on %s", scope["path"])
            outcome = GatewayError("The server had an error processing your request.")
            del error
        compressor, accept_encoding = compiled.compression, headers.get("accept-encoding")
        if isinstance(outcome, ClientDisconnected):
            status = outcome.status  # nobody is listening: nothing to send
        elif isinstance(outcome, GatewayError):
            if watch is not None:
                watch.stop()
            status, body, extra = render(outcome)
            sent_headers = _header_list(request_id, call, extra)
            await _send_bytes(send, status, _JSON, body, sent_headers, compressor, accept_encoding)
        elif isinstance(outcome, BytesResult):
            assert watch is not None
            watch.stop()
            status = outcome.status
            await _send_bytes(
                send,
                outcome.status,
                outcome.content_type.encode(),
                outcome.body,
                _header_list(request_id, call, {}),
                compressor,
                accept_encoding,
            )
        elif outcome is not None:
            assert call is not None and watch is not None
            status = outcome.status
            await _send_stream(call, outcome, _header_list(request_id, call, {}), watch, send)
    finally:
        if watch is not None:
            watch.stop()
        failure = outcome if isinstance(outcome, GatewayError) else None
        try:
            if call is not None:
                await call.finish(failure)  # after the last byte: settling never delays the response
            if observer is not None:
                observer.finish(
                    compiled,
                    span,
                    endpoint,
                    request_id,
                    status,
                    call.started_at if call is not None else started_at,
                    call,
                    failure,
                )
        finally:
            gateway.inflight.exit()


async def _send_stream(
    call: Call, result: StreamResult, headers: list[tuple[bytes, bytes]], watch: ClientWatch, send: Send
) -> None:
    """Relay a stream; a client disconnect cancels the relay at once (``watch``)."""
    events = result.events
    try:
        await send(
            {"type": "http.response.start", "status": result.status, "headers": headers + _SSE_HEADERS}
        )
        async for chunk in events:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        watch.stop()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not watch.absorb():
            raise
    finally:
        watch.stop()
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()  # closes the upstream connection if the relay did not finish
        await call.finish()
