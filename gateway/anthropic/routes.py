"""``POST /v1/messages/count_tokens``: the input tokens a Messages request would be counted for.

The count is the one the gateway's limits reserve for the same request (tiktoken over the translated
chat messages and tools, plus the pool's chat-template overhead), so a client can check a budget before
it sends. Authenticated like every route (``x-api-key`` or a bearer key); errors in Anthropic's shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.enums import MediaType
from litestar.handlers import HTTPRouteHandler

from gateway.anthropic.errors import from_openai_body
from gateway.anthropic.request import to_chat
from gateway.authentication import authenticate_client
from gateway.errors import GatewayError, ModelNotFound, render
from gateway.instance import Gateway
from gateway.tokens import TokenCounter

__all__ = ["messages_routes", "with_api_key"]


def with_api_key(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers with Anthropic's ``x-api-key`` as the bearer key the gateway reads. A key sent there
    is the one checked, whatever ``Authorization`` says (one bad credential is a 401, never skipped
    for another); without it, a bearer ``Authorization`` works as on every other route."""
    merged = dict(headers)
    if "x-api-key" in merged:
        merged["authorization"] = f"Bearer {merged['x-api-key']}"
    return merged


def _error(error: GatewayError) -> Response[bytes]:
    status, body, extra = render(error)
    return Response(
        content=from_openai_body(status, body), status_code=status, media_type=MediaType.JSON, headers=extra
    )


def messages_routes(gateway: Gateway) -> list[HTTPRouteHandler]:
    """The Litestar handlers of the Messages API beside ``POST /v1/messages`` (which is on the hot path)."""

    @post("/v1/messages/count_tokens", status_code=200)
    async def count_tokens(request: Request[Any, Any, Any]) -> Response[bytes]:
        compiled = gateway.compiled
        peer = request.client.host if request.client is not None else None
        try:
            key = await authenticate_client(
                compiled, with_api_key(request.headers), peer, gateway.clients, gateway.keys
            )
            chat = to_chat(await request.body(), is_count=True)
            model = chat["model"]
            pool = compiled.policy.pool_for_model(model)
            if pool is None or (key is not None and not compiled.keys.may_use(key, model, pool)):
                raise ModelNotFound.for_model(model)
            template = compiled.policy.pools[pool].template_tokens
            counter = TokenCounter.for_model(
                model, default_encoding=compiled.policy.store.unknown_model_encoding
            )
            count = counter.count_chat(
                chat["messages"],
                chat.get("tools"),
                per_message=template.per_message,
                per_request=template.per_request,
            )
        except GatewayError as error:
            return _error(error)
        return Response(content=msgspec.json.encode({"input_tokens": count}), media_type=MediaType.JSON)

    return [count_tokens]
