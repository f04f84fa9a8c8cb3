"""A request's life, from its first byte to its after-response work, owned in one place.

An HTTP request (``gateway.proxy``) and a WebSocket one (``gateway.websocket``) differ only in how
they arrive and how their answer leaves: that is their ``Exchange``. The rest happens here, once,
in this order::

    in flight -> its span starts (when sampled) -> the exchange opens the call (authenticates the
    caller, then reads and decodes the body) -> the pipeline runs -> the exchange delivers the result,
    or the error -> the call finishes (its after-response work, exactly once) -> the span ends and the
    access-log line is written -> out of flight

Stages never finish a call: they raise a ``GatewayError`` (or, mid-stream, record ``call.error``),
and :func:`live` finishes it after the client has its answer, so settling never delays a response.
A client that leaves (an HTTP disconnect, a WebSocket ``cancel``) cancels the request's task; the
exchange says whether a cancellation was that, and the request is then recorded as a 499.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gateway.authentication import check_priority
from gateway.compiled import CompiledPolicy
from gateway.errors import BodyTooLarge, ClientDisconnected, GatewayError, status_of
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.policy import ApiKey
from gateway.schemas import parse_body, stream_flags
from gateway.telemetry.access_log import AccessLog
from gateway.telemetry.spans import RequestSpan
from gateway.telemetry.tracing import GatewayTracer

if TYPE_CHECKING:
    from gateway.instance import Gateway

logger = logging.getLogger("sortyard.lifecycle")


class Observer:
    """What watches each request: its trace (when sampled) and its access-log line."""

    def __init__(self, tracer: GatewayTracer | None = None, access_log: AccessLog | None = None) -> None:
        self.tracer = tracer or GatewayTracer.from_env()
        self._access_log = access_log

    @property
    def access_log(self) -> AccessLog:
        if self._access_log is None:  # built on first use: no stdout buffer when logs are off
            self._access_log = AccessLog()
        return self._access_log

    def start(
        self, compiled: CompiledPolicy, headers: Mapping[str, str], scope: Mapping[str, Any]
    ) -> RequestSpan | None:
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


def new_call(
    endpoint: Endpoint,
    headers: Mapping[str, str],
    raw: bytes,
    compiled: CompiledPolicy,
    request_id: str,
    started_at: float,
    *,
    key: ApiKey | None = None,
    span: RequestSpan | None = None,
    peer: str | None = None,
    path: str | None = None,
) -> Call:
    """Decode one request body into a ``Call`` of the caller ``key`` (None: anonymous) under
    ``compiled``; a GatewayError (400, 413) when the body is too large for the policy, not a valid
    request, or sets a ``priority`` the key may not set."""
    limit = compiled.policy.limits.max_body_bytes
    if len(raw) > limit:
        raise BodyTooLarge(f"Request body is over the limit of {limit} bytes.")
    body, parsed = parse_body(endpoint, raw)
    is_stream, include_usage = stream_flags(parsed)
    call = Call(
        endpoint,
        body,
        headers,
        compiled,
        request_id,
        parsed.model,
        is_stream=is_stream,
        include_usage=include_usage,
        key=key,
        tenant=key.tenant if key is not None else compiled.policy.auth.anonymous_tenant,
        started_at=started_at,
        span=span,
        peer=peer,
        path=path,
    )
    check_priority(call, key)
    return call


class Exchange(Protocol):
    """How one request arrives and how its answer leaves (HTTP or a WebSocket message)."""

    @property
    def endpoint(self) -> Endpoint: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's headers (names in lower case); a WebSocket's are its upgrade's."""
        ...

    @property
    def id_headers(self) -> Mapping[str, str]:
        """Where the client's own ``x-request-id`` may be (a WebSocket request has none: its own id)."""
        ...

    @property
    def scope(self) -> Mapping[str, Any]:
        """At least ``method`` and ``path``: the span's name."""
        ...

    async def open(self, compiled: CompiledPolicy, request_id: str, span: RequestSpan | None) -> Call:
        """Authenticate the caller, read and decode the request into a ``Call`` (GatewayError: refused)."""
        ...

    async def deliver(self, call: Call, result: BytesResult | StreamResult) -> int:
        """Send the result; the status the client saw (499, with ``call.error`` set, when it left
        during a stream)."""
        ...

    async def refuse(self, call: Call | None, error: GatewayError) -> None:
        """Send the error (nothing for a ``ClientDisconnected``: nobody is listening)."""
        ...

    def is_client_gone(self) -> bool:
        """In an ``except CancelledError``: True (and the cancellation undone) when the client's leaving
        cancelled the request; False when someone else did (then it propagates)."""
        ...

    def close(self) -> None:
        """Stop watching the client (the request is over)."""
        ...


async def live(gateway: Gateway, observer: Observer | None, exchange: Exchange) -> None:
    """One request, from the exchange's first byte to its access-log line."""
    started_at = time.perf_counter()
    gateway.inflight.enter()  # until the last finisher has run (gateway.inflight)
    compiled = gateway.compiled  # the policy this request runs under, whatever reloads meanwhile
    request_id = gateway.request_id(exchange.id_headers)
    span = observer.start(compiled, exchange.headers, exchange.scope) if observer is not None else None
    call: Call | None = None
    error: GatewayError | None = None
    status = 500
    try:
        try:
            call = await exchange.open(compiled, request_id, span)
            result = await gateway.pipeline.run(call)
            status = await exchange.deliver(call, result)
        except GatewayError as refused:
            error = refused
        except asyncio.CancelledError:
            if not exchange.is_client_gone():
                error = ClientDisconnected("The request was cancelled: the server is stopping.")
                raise
            error = ClientDisconnected("The client closed the connection before the response.")
        except Exception:  # a bug: still OpenAI-shaped, never a bare 500 page
            logger.exception("unexpected error on %s", exchange.scope["path"])
            error = GatewayError("The server had an error processing your request.")
        if error is not None:
            status = status_of(error)
            if call is None:  # refused before the pipeline: counted here, the pipeline counts the rest
                gateway.metrics.count_request(exchange.endpoint.name.lower(), "-", status)
            await exchange.refuse(call, error)
    finally:
        exchange.close()
        try:
            if call is not None:
                await call.finish(error)  # after the last byte: settling never delays the response
                error = call.error
            if observer is not None:
                at = call.started_at if call is not None else started_at
                observer.finish(compiled, span, exchange.endpoint, request_id, status, at, call, error)
        finally:
            gateway.inflight.exit()
