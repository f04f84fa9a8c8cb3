"""The console's routes (Litestar): the page, and the admin JSON endpoints it reads.

    GET  /console                   the page (no data in it: open, counted per client like /openapi.json)
    GET  /v1/admin/pools            pools and replicas: health, breaker, load, recent latency
    POST /v1/admin/route/explain    {"prompt", "system"?, "tools"?, "json_mode"?} -> the auto pool and why
    GET  /v1/admin/policy           the serving policy (no hashes, no credentials) and its reload time

The JSON endpoints are for the roles ``gateway.roles`` names (403 ``insufficient_role``, 401 without
a key) and answer errors in OpenAI's shape; a refused call is handed to ``record`` (the audit trail,
``gateway.audit``); none of them changes state, so a served one is not recorded. The page also uses
what exists already: ``GET /v1/usage``, the key admin API (``gateway.keys.routes``), ``GET /v1/models``
and ``GET /v1/ws``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.types import BeforeRequestHookHandler

from gateway.compiled import CompiledPolicy
from gateway.console.page import build_page
from gateway.console.views import ExplainRequest, explain, policy_view, pools_view
from gateway.errors import GatewayError
from gateway.instance import Gateway
from gateway.policy import ApiKey
from gateway.roles import Principal, authorize
from gateway.schemas import decode_as

__all__ = ["CONSOLE_PATH", "console_routes"]

CONSOLE_PATH = "/console"
Authenticate = Callable[[CompiledPolicy, Request[Any, Any, Any]], Awaitable[ApiKey | None]]
RecordCall = Callable[[Request[Any, Any, Any], ApiKey | None, str, str, dict[str, Any], int], Awaitable[Any]]
_encode = msgspec.json.encode


def console_routes(
    gateway: Gateway,
    authenticate: Authenticate,
    render: Callable[[GatewayError], Response[bytes]],
    page_limit: BeforeRequestHookHandler | None = None,
    record: RecordCall | None = None,
) -> list[HTTPRouteHandler]:
    """The routes, bound to ``gateway``; ``render`` turns an error into the response every route sends;
    ``page_limit`` may answer instead of the page (the per-client limit on open endpoints)."""
    page = build_page()  # once: the package files do not change under a running gateway

    @get(CONSOLE_PATH, before_request=page_limit)
    async def console() -> Response[bytes]:
        return Response(content=page.body, media_type=MediaType.HTML, headers=page.headers)

    async def as_admin(
        request: Request[Any, Any, Any], action: str, act: Callable[[CompiledPolicy], Any]
    ) -> Response[bytes]:
        """Authenticate a key whose role may do ``action``, then answer ``act(policy)``; every failure
        in OpenAI's shape."""
        compiled = gateway.compiled
        key: ApiKey | None = None
        try:
            key = await authenticate(compiled, request)
            authorize(Principal.of_key(key) if key is not None else None, action)
            result = act(compiled)
        except GatewayError as error:
            response = render(error)
            if record is not None and response.status_code in (401, 403):
                await record(request, key, "admin.read", request.url.path, {}, response.status_code)
            return response
        return Response(content=_encode(result), media_type=MediaType.JSON)

    @get("/v1/admin/pools")
    async def pools(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await as_admin(request, "pools.read", lambda compiled: pools_view(gateway.balancer, compiled))

    @post("/v1/admin/route/explain", status_code=200)
    async def route_explain(request: Request[Any, Any, Any]) -> Response[bytes]:
        body = await request.body()
        return await as_admin(
            request, "route.explain", lambda compiled: explain(compiled, decode_as(body, ExplainRequest))
        )

    @get("/v1/admin/policy")
    async def policy(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await as_admin(request, "policy.read", lambda compiled: policy_view(gateway.reloader))

    return [console, pools, route_explain, policy]
