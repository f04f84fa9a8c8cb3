"""``POST /v1/messages/count_tokens``: the input tokens a Messages request would be counted for.

The request lives as ``POST /v1/messages`` would up to its limits stage, with the same pieces: the
caller is authenticated before the body is read, the body is read under the policy's
``limits.max_body_bytes`` (413 past it), translated and validated (``request.to_chat``, then the chat
request check every call gets), and its model routed by the pipeline's own route stage (an alias, a
pool, or ``auto`` through the tier classifier). The count is then the one the limits stage reserves
(``prompt_tokens``: tiktoken over the chat messages and tools, plus the routed pool's chat-template
overhead), so a client can check a budget before it sends. Errors are Anthropic's shape with the
request's id, as on ``/v1/messages``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, cast

import msgspec
from litestar import Request, Response, post
from litestar.enums import MediaType
from litestar.handlers import HTTPRouteHandler

from gateway.anthropic.errors import from_openai_body
from gateway.anthropic.request import to_chat
from gateway.authentication import authenticate_client
from gateway.errors import GatewayError, render
from gateway.instance import Gateway
from gateway.lifecycle import new_call
from gateway.pipeline import Endpoint
from gateway.proxy import Receive, read_body
from gateway.stages.limits import prompt_tokens
from gateway.stages.route import RouteModel

__all__ = ["messages_routes", "with_api_key"]

logger = logging.getLogger("sortyard.anthropic")


def with_api_key(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers with Anthropic's ``x-api-key`` as the bearer key the gateway reads. A key sent there
    is the one checked, whatever ``Authorization`` says (one bad credential is a 401, never skipped
    for another); without it, a bearer ``Authorization`` works as on every other route."""
    merged = dict(headers)
    if "x-api-key" in merged:
        merged["authorization"] = f"Bearer {merged['x-api-key']}"
    return merged


def _error(error: GatewayError, request_id: str, *, closes: bool) -> Response[bytes]:
    """Anthropic's error with the request's id (in the body and ``x-request-id``), as ``/v1/messages``
    answers it; ``closes``: the connection closes after it."""
    status, body, extra = render(error)
    headers = {**extra, "x-request-id": request_id}
    if closes:
        headers["Connection"] = "close"
    return Response(
        content=from_openai_body(status, body, request_id),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


def _unexpected(exc: Exception) -> GatewayError:
    """A bug, logged with its traceback: the client gets a plain 500 (``api_error``), never the trace."""
    logger.error("unexpected error on POST /v1/messages/count_tokens", exc_info=exc)
    return GatewayError("The server had an error processing your request.")


def _announces_body(headers: Mapping[str, str]) -> bool:
    """Whether the request says a body follows: refused before it is read, the connection closes, as
    ``gateway.proxy`` does, so the client stops sending the rest for nothing."""
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def _route_stage(gateway: Gateway) -> RouteModel:
    """The pipeline's own route stage (its sticky tiers and embedder): a count routes ``auto`` exactly
    as the message would."""
    for stage in gateway.pipeline.stages:
        if isinstance(stage, RouteModel):
            return stage
    raise LookupError("the pipeline has no route stage")


def messages_routes(gateway: Gateway) -> list[HTTPRouteHandler]:
    """The Litestar handlers of the Messages API beside ``POST /v1/messages`` (which is on the hot path)."""
    route = _route_stage(gateway)

    @post("/v1/messages/count_tokens", status_code=200)
    async def count_tokens(request: Request[Any, Any, Any]) -> Response[bytes]:
        compiled, settings = gateway.compiled, gateway.settings
        headers = with_api_key(request.headers)
        request_id = gateway.request_id(headers)
        peer = request.client.host if request.client is not None else None
        is_body_read = False
        try:
            # who is calling, before the body; then the body under the policy's bound, as /v1/messages
            key = await authenticate_client(compiled, headers, peer, gateway.clients, gateway.keys)
            limit = min(settings.hard_max_body_bytes, compiled.policy.limits.max_body_bytes)
            receive = cast("Receive", request.receive)  # the ASGI receive (Litestar types its events)
            raw = await read_body(receive, headers, limit, settings.body_read_timeout_s)
            is_body_read = True
            chat = msgspec.json.encode(to_chat(raw, is_count=True))
            call = new_call(
                Endpoint.CHAT,
                headers,
                chat,
                compiled,
                request_id,
                time.perf_counter(),
                key=key,
                peer=peer,
                path=request.url.path,
            )
            await route(call)  # call.pool: the alias's, the pool's, or the classifier's for auto (404)
            input_tokens = prompt_tokens(call)
        except Exception as exc:  # a bug too is Anthropic's error with the id, as on /v1/messages
            error = exc if isinstance(exc, GatewayError) else _unexpected(exc)
            return _error(error, request_id, closes=not is_body_read and _announces_body(headers))
        return Response(
            content=msgspec.json.encode({"input_tokens": input_tokens}),
            media_type=MediaType.JSON,
            headers={"x-request-id": request_id},
        )

    return [count_tokens]
