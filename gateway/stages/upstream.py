"""Stage: call the chosen replica and turn its answer into the call's result.

The body is forwarded with every unknown field intact; only ``model`` is rewritten to the
replica's served name (``priority`` is set from the policy, see below; for chat and completion
streams, ``stream_options.include_usage`` is switched on so the gateway can account tokens, see
``gateway.sse.upstream_stream_options``). Responses name the model the client asked for. Each attempt
sends its own ``X-Request-Id`` (``gateway.request_ids``): the client's id repeats, an attempt's may
not. A pass-through route goes to the replica's server root (``base_url`` without its ``/v1``)
plus its path. A stream is relayed event by event (see ``gateway.sse``; the Responses API's,
``gateway.responses_api``); everything that can fail before the first byte reaches the client fails
as a plain HTTP error, anything later ends the stream with an error event and ``[DONE]``.

A replica whose ``kind`` has a native API (``gateway.adapters``: TGI, Triton, Ollama, llama.cpp)
gets the request in that form, and its answer is read back as the OpenAI one (JSON, SSE, errors),
so everything below is the same for every kind. A Responses request goes to a replica's own
``/v1/responses`` (``Replica.serves_responses``: sent ``store: false``, the gateway keeps the state),
or over its chat completions (``gateway.adapters.responses``), read back as the Responses answer.

Timeouts mean what they say for each kind of response. A plain (non-stream) response's headers come
when generation ends (vLLM sends them with the body), so only the request's ``total_s`` bounds the
wait: ``first_byte_s`` would cap the generation. A stream's headers and first event must come within
``first_byte_s`` (and ``total_s``), later events within ``idle_s`` of each other.

The replica's breaker counts what says it is broken: refused or timed-out connects, resets, 5xx and
malformed answers. A timeout of a request it accepted does not count (slow is not broken; a hung
replica fails its ``/health`` probes), nor does its own 4xx (the client's problem).

When the policy gives the caller's key or tenant a ``priority``, it is set here, at sending time, so
it never enters cache keys. A client's own ``priority`` gets this far only when its key has
``allow_client_priority`` (the auth stage refuses the rest), and may ask for a later place than the
policy's, never an earlier one (engines run lower values first).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

import msgspec

from gateway.adapters import ResponsesOverChat, TranslatedResponse
from gateway.errors import (
    GatewayError,
    ServiceUnavailable,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
)
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult, UpstreamSpan, Usage
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.client import UpstreamClient, UpstreamResponse
from gateway.request_ids import RequestIds
from gateway.responses_api import ResponsesRelay, read_response_usage
from gateway.sse import SSERelay, model_rewriter, read_body_usage, rewrite, upstream_stream_options

_encode = msgspec.json.encode
_MAX_ERROR_BODY = 64 * 1024


class _ErrorProbe(msgspec.Struct):
    error: dict[str, object]


def _output_messages(payload: bytes) -> list[object]:
    """The choices' messages (or texts) of a plain response, for content capture only."""
    try:
        document = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return []
    choices = document.get("choices") if isinstance(document, dict) else None
    if not isinstance(choices, list):
        return []
    return [c.get("message") or c.get("text") for c in choices if isinstance(c, dict)]


_RETRY_AFTER = re.compile(r"[0-9]{1,9}|[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9:]{8} GMT")
"""What of an upstream's ``Retry-After`` is relayed: seconds, or an HTTP date."""


def _relayable_error(status: int, body: bytes, served: str = "", asked: str = "") -> UpstreamStatusError:
    """The upstream's 4xx, kept as is when it is already OpenAI-shaped, else wrapped; naming the model
    the client asked for where it quotes the one the replica serves (``served``)."""
    body = _naming_asked(body[:_MAX_ERROR_BODY], served, asked)
    try:
        msgspec.json.decode(body, type=_ErrorProbe)
        return UpstreamStatusError(status, body, "upstream rejected the request")
    except (msgspec.DecodeError, msgspec.ValidationError):
        text = body.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
        wrapped = GatewayError(f"Upstream rejected the request: {text}")
        envelope = {
            "error": {
                "message": wrapped.message,
                "type": "invalid_request_error",
                "param": None,
                "code": "upstream_status",
            }
        }
        return UpstreamStatusError(status, _encode(envelope), wrapped.message)


def _naming_asked(body: bytes, served: str, asked: str) -> bytes:
    """``body`` with the served model's quoted name (``The model `llama-8b` does not exist``) replaced by
    the asked one's, as every answer names the model the client asked for: the replica's own name is
    the operator's (a client that sent an alias, or a model to the wrong endpoint, never heard it)."""
    if not served or served == asked:
        return body
    s, a = msgspec.json.encode(served)[1:-1], msgspec.json.encode(asked)[1:-1]
    for quote in (b"`", b"'", b'\\"'):
        body = body.replace(quote + s + quote, quote + a + quote)
    return body


class CallUpstream:
    """Sends the call to ``call.replica`` and sets ``call.result``."""

    name = "upstream"

    def __init__(self, client: UpstreamClient, balancer: Balancer, ids: RequestIds | None = None) -> None:
        self.client = client
        self.balancer = balancer
        self.ids = ids or RequestIds()
        """Each attempt's own ``X-Request-Id``."""

    async def __call__(self, call: Call) -> None:
        state = call.replica
        assert state is not None and call.pool is not None
        url = _url(call, state)  # before anything is started: a fallback may lack a pass-through route
        replica = state.replica
        body = call.body
        body["model"] = replica.model
        is_passthrough = call.endpoint is Endpoint.PASSTHROUGH  # the backend's own route: no priority
        priority = None if is_passthrough else call.priority
        if priority is not None:  # lower runs first: a client's own may not go below the policy's
            body["priority"] = priority
        if call.is_stream and call.endpoint is not Endpoint.RESPONSES:  # Responses streams carry usage
            options = body.get("stream_options")
            body["stream_options"] = upstream_stream_options(options, include_usage=call.include_usage)
        exchange = None
        if not is_passthrough:  # the replica's kind may want its native API (None: OpenAI mode)
            adapter = state.adapter
            if call.endpoint is Endpoint.RESPONSES:  # the gateway keeps the state (stages.conversation)
                if replica.serves_responses:
                    body["store"] = False
                    body.pop("previous_response_id", None)  # its conversation is in input
                else:  # a chat-only server: the Responses API over its chat completions
                    adapter = ResponsesOverChat(adapter, replica.base_url)
            exchange = adapter.exchange(call.endpoint.value, body, state.root, stream=call.is_stream)
        upstream_id = self.ids.for_upstream(call.request_id)  # the client's id may repeat; this never does
        headers = {"Content-Type": "application/json", "X-Request-Id": upstream_id, **state.headers}
        attempt: UpstreamSpan | None = None
        if call.span is not None:  # traced: the replica continues this attempt's span
            attempt = call.span.start_attempt(call, replica.model, state.label, max(call.attempts, 1))
            headers["traceparent"] = attempt.traceparent
            tracestate = call.headers.get("tracestate")
            if tracestate:
                headers["tracestate"] = tracestate
        else:  # not traced here: the caller's trace context passes through untouched
            traceparent = call.headers.get("traceparent")
            if traceparent:
                headers["traceparent"] = traceparent
                tracestate = call.headers.get("tracestate")
                if tracestate:
                    headers["tracestate"] = tracestate
        timeouts = call.policy.timeouts_for(call.pool)
        what = f"upstream {state.label}"

        state.acquire()
        call.on_finish(_release(self.balancer, state))
        sent_at = time.perf_counter()
        deadline = call.deadline  # retries share it (gateway.stages.retry)
        first_byte_at = min(sent_at + timeouts.first_byte_s, deadline)
        # plain: the headers come when generation ends, so only total_s bounds them
        headers_s = max(0.0, (first_byte_at if call.is_stream else deadline) - sent_at)
        try:
            if exchange is None:
                response = await self.client.post(
                    url, _encode(body), headers, timeouts, what, headers_s=headers_s
                )
            else:  # the replica's native API (gateway.adapters): read back as its OpenAI mode would answer
                native = await self.client.post(
                    exchange.url, exchange.body, headers, timeouts, what, headers_s=headers_s
                )
                response = TranslatedResponse(native, exchange)
        except BaseException as error:
            if _is_broken(error):
                self.balancer.record_failure(state)
            if attempt is not None:
                attempt.end(call, error)
            raise
        replacements = model_rewriter(replica.model, call.model)
        if not call.is_stream or response.status != 200:
            try:
                if response.status != 200:
                    await self._raise_for_status(response, state, replica.model, call.model)
                payload = await response.read()
                usage, finish_reasons = _read_usage(call.endpoint, payload)
            except BaseException as error:
                if _is_broken(error):
                    self.balancer.record_failure(state)
                if attempt is not None:
                    attempt.end(call, error)
                raise
            response.release()
            elapsed_s = time.perf_counter() - sent_at
            call.upstream_s += elapsed_s
            self.balancer.record_success(state, elapsed_s)
            call.usage, call.finish_reasons = usage, finish_reasons
            content_type = response.content_type if is_passthrough else ""  # the backend's, as it is
            call.result = BytesResult(200, rewrite(payload, replacements), content_type or "application/json")
            if attempt is not None:
                if call.span is not None and call.span.captures_content and not call.guards_output:
                    attempt.record_output(_output_messages(payload))
                attempt.end(call)
            return
        relay = (
            ResponsesRelay(replacements)
            if call.endpoint is Endpoint.RESPONSES
            else SSERelay(replacements, drop_usage_chunk=not call.include_usage)
        )
        # the first event within first_byte_s of sending (prefill, queueing), later ones within idle_s
        chunks = response.chunks(timeouts.idle_s, first_s=max(0.0, first_byte_at - time.perf_counter()))
        try:
            first = await self._first_events(chunks, relay)
        except BaseException as error:
            response.close()
            if _is_broken(error):
                self.balancer.record_failure(state)
            if attempt is not None:
                attempt.end(call, error)
            raise
        call.first_token_at = time.perf_counter()
        elapsed_s = call.first_token_at - sent_at
        call.upstream_s += elapsed_s
        self.balancer.record_success(state, elapsed_s)  # time to the first event: the recent latency
        call.result = StreamResult(_relay(call, response, chunks, relay, first, attempt))

    async def _raise_for_status(
        self, response: UpstreamResponse, state: ReplicaState, served: str, asked: str
    ) -> None:
        try:
            payload = await response.read()
        except GatewayError:
            payload = b""
        response.release()
        if response.status >= 500:
            raise UpstreamError(f"Upstream {state.label} answered HTTP {response.status}.")
        error = _relayable_error(response.status, payload, served, asked)
        retry_after = response.retry_after
        if retry_after is not None and _RETRY_AFTER.fullmatch(retry_after):
            error.headers["Retry-After"] = retry_after  # a 429's wait, for the client's own backoff
        raise error

    @staticmethod
    async def _first_events(chunks: AsyncIterator[bytes], relay: SSERelay) -> bytes:
        """Read until the relay has something to send, so early failures are plain HTTP errors."""
        async for chunk in chunks:
            out = relay.feed(chunk)
            if out:
                return out
            if relay.failure is not None:
                raise relay.failure
        raise UpstreamProtocolError("upstream closed the stream before sending an event")


def _url(call: Call, state: ReplicaState) -> str:
    """Where the attempt goes: the replica's ``base_url`` plus the endpoint's path; a pass-through route
    goes to its server root plus the route (vLLM serves ``/tokenize`` beside ``/v1``, not under it), and only
    to a pool that declares the route (a fallback pool may not: then no replica can serve it)."""
    if call.endpoint is not Endpoint.PASSTHROUGH:
        path: str = call.endpoint.value
        return state.replica.base_url.rstrip("/") + path
    pool = call.policy.pools.get(state.pool)
    if pool is None or call.path is None or call.path not in pool.passthrough_routes:
        raise ServiceUnavailable(
            f"No replica of pool `{call.pool}` can serve {call.path} now; try again shortly.",
            code="no_healthy_replica",
            headers={"Retry-After": "1"},
        )
    return state.root + call.path


def _read_usage(endpoint: Endpoint, payload: bytes) -> tuple[Usage | None, list[str]]:
    """Usage and finish reasons of a plain answer (a pass-through route's counts nothing)."""
    if endpoint is Endpoint.RESPONSES:
        return read_response_usage(payload)
    if endpoint is Endpoint.PASSTHROUGH:
        return None, []
    return read_body_usage(payload)


def _is_broken(error: BaseException) -> bool:
    """Does this failure count against the replica's breaker? Connect errors (a connect timeout
    included), resets, 5xx and malformed answers do; timeouts and the upstream's own 4xx do not."""
    return isinstance(error, UpstreamError) and not isinstance(error, UpstreamStatusError)


def _release(balancer: Balancer, state: ReplicaState):  # type: ignore[no-untyped-def]
    async def release(call: Call, error: GatewayError | None) -> None:
        balancer.release(state)  # a fair queue waiting on the pool gets the slot

    return release


async def _relay(
    call: Call,
    response: UpstreamResponse,
    chunks: AsyncIterator[bytes],
    relay: SSERelay,
    first: bytes,
    attempt: UpstreamSpan | None,
) -> AsyncIterator[bytes]:
    """The client's stream: the first events, then the rest as they arrive, then the end."""
    error: GatewayError | None = None
    try:
        yield first
        if relay.failure is not None:
            raise relay.failure
        if not relay.is_done:
            async for chunk in chunks:
                out = relay.feed(chunk)
                if out:
                    yield out
                if relay.failure is not None:
                    raise relay.failure
                if relay.is_done:
                    break
        if not relay.is_done:  # the upstream closed the stream
            if relay.error is None and not relay.is_complete:
                raise UpstreamProtocolError("upstream closed the stream before its end")
            closing = relay.closing()  # after the upstream's own error event: close the stream cleanly
            if closing:
                yield closing
    except GatewayError as e:
        error = e
        yield relay.error_event(e)
    finally:
        # a client that went away cancels us here; dropping the connection stops the upstream
        if relay.is_complete:
            response.release()
        else:
            response.close()
        call.usage = relay.usage
        call.finish_reasons = relay.finish_reasons
        call.num_events = relay.num_events
        if attempt is not None:
            attempt.end(call, error)
        if error is not None:
            call.error = error  # the request's owner finishes the call once the stream is over
