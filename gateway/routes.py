"""The endpoints beside the proxied API: models, usage, stored responses (``gateway.responses.routes``),
key admin (``gateway.keys.routes``), the console (``gateway.console``), the admin operations
(``gateway.operations``: whoami, reload, drain), health, readiness and metrics (Litestar).

Each answers in OpenAI's shape, errors included (``render``); Litestar's own errors (an unknown
route, a wrong method) are turned into the same shape by :func:`http_exception`. A failed
authentication counts against its client (``gateway.client_limits``), and so does every request to
``/metrics`` and ``/openapi.json`` (:func:`open_route_limit`); ``/healthz`` and ``/readyz`` are never
limited, so probes always get through.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, get
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler

from gateway.anthropic.errors import from_openai_body
from gateway.audit import AuditTrail
from gateway.audit.policy_diff import PolicyReloadAudit
from gateway.authentication import authenticate_client
from gateway.compiled import CompiledPolicy, model_card
from gateway.console import console_routes
from gateway.errors import (
    AuthenticationFailed,
    BodyTooLarge,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    ServiceUnavailable,
    render,
)
from gateway.instance import Gateway
from gateway.keys.routes import key_admin_routes
from gateway.operations import operation_routes
from gateway.policy import ApiKey, Policy
from gateway.responses.routes import response_routes
from gateway.roles import Principal, authorize, scoped_tenant
from gateway.schemas import decode_as
from gateway.sso import SingleSignOn, sso_routes
from gateway.stages.limits import month_of
from gateway.stores import StoreUnavailable

__all__ = ["api_routes", "http_exception", "open_route_limit", "unexpected"]

MESSAGES_PATH = "/v1/messages"
"""Anthropic's API: an unknown route under it answers in Anthropic's error shape."""

logger = logging.getLogger("sortyard.gateway")
_encode = msgspec.json.encode
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def _error_response(error: GatewayError) -> Response[bytes]:
    status, body, headers = render(error)
    return Response(
        content=body, status_code=status, media_type=MediaType.JSON, headers={"x-request-id": "-", **headers}
    )


def _peer(request: Request[Any, Any, Any]) -> str | None:
    client = request.client
    return client.host if client is not None else None


def open_route_limit(
    gateway: Gateway,
) -> Callable[[Request[Any, Any, Any]], Awaitable[Response[bytes] | None]]:
    """A ``before_request`` hook counting a request to an open endpoint against its client: a 429 (or
    a 503 under ``fail_closed`` with the store down) instead of the route's answer past the bound."""

    async def limit(request: Request[Any, Any, Any]) -> Response[bytes] | None:
        try:
            await gateway.clients.count_request(gateway.compiled, _peer(request), request.headers)
        except GatewayError as error:
            return _error_response(error)
        return None

    return limit


def api_routes(
    gateway: Gateway,
    audit: AuditTrail | None = None,
    sso: SingleSignOn | None = None,
    reload_audit: PolicyReloadAudit | None = None,
) -> list[HTTPRouteHandler]:
    """The Litestar route handlers, bound to ``gateway``; admin calls are recorded on ``audit``;
    ``sso`` signs admins in by bearer JWT or console session when the policy has an ``sso`` section;
    ``reload_audit`` (the reloader's audit listener) names the caller of a reload on its entry."""
    sso = sso or SingleSignOn()

    async def authenticate(compiled: CompiledPolicy, request: Request[Any, Any, Any]) -> ApiKey | None:
        return await authenticate_client(
            compiled, request.headers, _peer(request), gateway.clients, gateway.keys
        )

    async def authenticate_admin(compiled: CompiledPolicy, request: Request[Any, Any, Any]) -> ApiKey | None:
        """A single sign-on caller (``gateway.sso``) when the policy has ``sso``, else an API key."""
        try:
            key = await sso.admin_key(compiled.policy.sso, request.method, request.headers, request.cookies)
        except AuthenticationFailed:
            await gateway.clients.count_failure(compiled, _peer(request), request.headers)
            raise
        return key if key is not None else await authenticate(compiled, request)

    @get("/v1/models")
    async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
        compiled = gateway.compiled
        try:
            key = await authenticate(compiled, request)
        except GatewayError as error:
            return _error_response(error)
        return Response(content=compiled.models_body_for(key), media_type=MediaType.JSON)

    @get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request[Any, Any, Any], model_id: str) -> Response[bytes]:
        model_id = model_id.lstrip("/")
        compiled = gateway.compiled
        try:
            key = await authenticate(compiled, request)
            pool = compiled.policy.pool_for_model(model_id)
            if pool is None or (key is not None and not compiled.keys.may_use(key, model_id, pool)):
                raise ModelNotFound.for_model(model_id)
        except GatewayError as error:
            return _error_response(error)
        return Response(content=_encode(model_card(model_id)), media_type=MediaType.JSON)

    @get("/v1/usage")
    async def usage(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Spend and tokens per tenant, key and pool for a month (``?month=2026-11``), for the roles
        ``gateway.roles`` lets read usage (a ``tenant-admin``: its own tenant's only)."""
        try:
            key = await authenticate_admin(gateway.compiled, request)
            principal = Principal.of_key(key) if key is not None else None
            tenant = scoped_tenant(principal, request.query_params.get("tenant"))
            authorize(principal, "usage.read", tenant)
            month = request.query_params.get("month") or month_of(time.time())
            if not _MONTH.match(month):
                raise InvalidRequest("month: expected YYYY-MM.", param="month")
            report = await gateway.store.usage(month, tenant)
        except StoreUnavailable:
            return _error_response(
                ServiceUnavailable(
                    "Usage store unavailable.", code="store_unavailable", headers={"Retry-After": "1"}
                )
            )
        except GatewayError as error:
            return _error_response(error)
        return Response(content=_encode(report), media_type=MediaType.JSON)

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz")
    async def readyz() -> Response[bytes]:
        if gateway.is_draining:  # told to stop (or drained): out of the load balancer first, no store ping
            return Response(
                content=_encode({"status": "draining", "checks": {"accepting": False}}),
                status_code=503,
                media_type=MediaType.JSON,
            )
        checks = {
            "policy": True,
            "store": await gateway.store.ping(),
            "replica": gateway.balancer.has_healthy(),
        }
        # fail_open serves through a store outage (a local limiter stands in): leaving the load
        # balancer then would empty it of every gateway at once, so only fail_closed needs the store
        needs_store = gateway.policy.store.on_failure == "fail_closed"
        ready = checks["policy"] and checks["replica"] and (checks["store"] or not needs_store)
        return Response(
            content=_encode({"status": "ready" if ready else "not ready", "checks": checks}),
            status_code=200 if ready else 503,
            media_type=MediaType.JSON,
        )

    @get("/metrics", before_request=open_route_limit(gateway))
    async def metrics_endpoint() -> Response[bytes]:
        gateway.balancer.breaker_states()  # lets breakers whose open time passed turn half-open
        gateway.metrics.update_replicas(gateway.balancer.all_replicas())
        # the content type already names its charset; Litestar would append a second one to a text/ type
        return Response(
            content=gateway.metrics.render(), headers={"content-type": gateway.metrics.content_type}
        )

    def client_of(request: Request[Any, Any, Any]) -> str:
        """The client address the limits count by (and the audit trail names)."""
        return gateway.compiled.clients.client_of(_peer(request), request.headers.get("x-forwarded-for"))

    async def record(
        request: Request[Any, Any, Any],
        key: ApiKey | None,
        action: str,
        target: str,
        details: dict[str, Any],
        status: int,
    ) -> None:
        """One admin call on the audit trail, from the client address the limits count by."""
        if audit is not None:
            await audit.record_admin_call(key, action, target, details, client_of(request), status)

    admin = key_admin_routes(
        gateway.key_admin, authenticate_admin, lambda: gateway.compiled, _error_response, decode_as, record
    )
    console = console_routes(gateway, authenticate_admin, _error_response, open_route_limit(gateway), record)
    operations = operation_routes(
        gateway, authenticate_admin, _error_response, record, client_of, reload_audit
    )

    async def caller(request: Request[Any, Any, Any]) -> tuple[Policy, ApiKey | None]:
        compiled = gateway.compiled
        return compiled.policy, await authenticate(compiled, request)

    stored = response_routes(lambda: gateway.caches.stored_responses, caller, _error_response)

    async def signed_in(
        request: Request[Any, Any, Any], user: str, tenant: str | None, action: str, status: int
    ) -> None:
        """A console sign-in or sign-out on the audit trail."""
        if audit is not None:
            await audit.record(user, action, tenant=tenant, client=client_of(request), status=status)

    signin = sso_routes(
        sso, lambda: gateway.compiled.policy.sso, _error_response, open_route_limit(gateway), signed_in
    )
    return [
        *(list_models, usage, retrieve_model, healthz, readyz, metrics_endpoint),
        *(*admin, *console, *operations, *signin, *stored),
    ]


def http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    """Litestar's own errors (unknown route, wrong method, body too big) in OpenAI's shape."""
    error: GatewayError
    if exc.status_code == 404:
        error = NotFound(f"Unknown request URL: {request.method} {request.url.path}.")
    elif exc.status_code == 405:
        allow = (exc.headers or {}).get("allow")  # Litestar names the route's methods
        error = MethodNotAllowed(
            f"Method {request.method} is not allowed for {request.url.path}.",
            headers={"Allow": allow} if allow else None,
        )
    elif exc.status_code == 413:
        error = BodyTooLarge("Request body is too large.")
    elif exc.status_code < 500:
        error = InvalidRequest(str(exc.detail))
    else:
        error = GatewayError(str(exc.detail))
    status, body, headers = render(error)
    path = request.url.path
    if path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/"):  # /v1/messages/batches: Anthropic's
        body = from_openai_body(status, body)
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)


def unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    logger.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    status, body, headers = render(GatewayError("The server had an error processing your request."))
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)
