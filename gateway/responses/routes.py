"""The stored responses' routes (Litestar), for the caller's own tenant:

    GET    /v1/responses/{id}                 the response as it was answered
    DELETE /v1/responses/{id}                 {"id", "object": "response", "deleted": true}
    GET    /v1/responses/{id}/input_items     its input items: a list (``limit`` 1..100, default 20;
                                              ``order`` desc (default) or asc; ``after`` an item id)

Each needs a key like the proxied API. An id the caller's tenant has no response under (another
tenant's, deleted, expired, or stored with ``store: false``) is a 404 ``not_found``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import HttpMethod, MediaType, Request, Response, get, route
from litestar.handlers import HTTPRouteHandler

from gateway.errors import GatewayError, InvalidRequest, NotFound
from gateway.policy import ApiKey, Policy
from gateway.responses.store import ResponseStore, StoredResponse

__all__ = ["list_input_items", "response_routes"]

Authenticate = Callable[[Request[Any, Any, Any]], Awaitable[tuple[Policy, ApiKey | None]]]
_encode = msgspec.json.encode


def list_input_items(stored: StoredResponse, query: dict[str, str]) -> dict[str, Any]:
    """A page of a stored response's input items, in OpenAI's list shape."""
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
        raise InvalidRequest("limit must be an integer from 1 to 100.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be asc or desc.", param="order")
    items = stored.input_items if order == "asc" else stored.input_items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequest(f"No input item with id '{after}'.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[: int(limit_text)]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": len(items) > len(page),
    }


def response_routes(
    store: Callable[[], ResponseStore],
    authenticate: Authenticate,
    render: Callable[[GatewayError], Response[bytes]],
) -> list[HTTPRouteHandler]:
    """The routes; ``authenticate`` answers the policy and the caller's key (None: anonymous),
    ``render`` turns an error into the response every route sends."""

    async def find(request: Request[Any, Any, Any], response_id: str) -> tuple[str, StoredResponse]:
        policy, key = await authenticate(request)
        tenant = key.tenant if key is not None else policy.auth.anonymous_tenant
        stored = await store().get(tenant, response_id)
        if stored is None:
            raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
        return tenant, stored

    # one handler for both methods, so an OPTIONS request's Allow header names both
    @route(
        "/v1/responses/{response_id:str}", http_method=[HttpMethod.GET, HttpMethod.DELETE], status_code=200
    )
    async def response(request: Request[Any, Any, Any], response_id: str) -> Response[bytes]:
        try:
            tenant, stored = await find(request, response_id)
            if request.method == HttpMethod.DELETE:
                await store().delete(tenant, response_id)
                deleted = {"id": response_id, "object": "response", "deleted": True}
                return Response(content=_encode(deleted), media_type=MediaType.JSON)
        except GatewayError as error:
            return render(error)
        return Response(content=_encode(stored.response), media_type=MediaType.JSON)

    @get("/v1/responses/{response_id:str}/input_items")
    async def input_items(request: Request[Any, Any, Any], response_id: str) -> Response[bytes]:
        try:
            _, stored = await find(request, response_id)
            page = list_input_items(stored, dict(request.query_params))
        except GatewayError as error:
            return render(error)
        return Response(content=_encode(page), media_type=MediaType.JSON)

    return [response, input_items]
