"""The app: the pipeline's declared order, the gateway runtime, and the routes.

``create_app(settings, *, client=None, reloader=None, store=None)`` builds everything; every I/O
seam (the upstream client, the policy source, the store) can be injected. The three proxied API
endpoints are served straight from ASGI (``gateway.proxy``: the hot path); everything else
(models, usage, health, metrics, and every error for unknown routes) is a Litestar route.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec
from litestar import Litestar, MediaType, Request, Response, get
from litestar.exceptions import HTTPException
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from gateway.errors import (
    AuthenticationFailed,
    BodyTooLarge,
    ClientDisconnected,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
    render,
    status_of,
)
from gateway.inflight import InFlight
from gateway.openapi import openapi_route
from gateway.pipeline import BytesResult, Call, Endpoint, Pipeline, StreamResult
from gateway.policy import ApiKey, Policy
from gateway.proxy import ProxyApp
from gateway.reloader import PolicyReloader
from gateway.replicas.balancer import Balancer
from gateway.replicas.health import HealthChecker
from gateway.schemas import ChatRequest, CompletionRequest, EmbeddingRequest, parse_body
from gateway.settings import Settings
from gateway.shared_state import Caches, build_caches, build_store
from gateway.stages.auth import Authenticate, KeyIndexCache, bearer_token
from gateway.stages.cache import ResponseCacheStage
from gateway.stages.embeddings import EmbeddingCacheStage
from gateway.stages.limits import EnforceLimits, month_of
from gateway.stages.pick import PickReplica
from gateway.stages.retry import CallWithRetries
from gateway.stages.route import ClassifierCache, RouteModel
from gateway.stages.upstream import CallUpstream
from gateway.stores import Store, StoreUnavailable
from gateway.telemetry.metrics import Metrics
from gateway.upstream_client import AiohttpUpstreamClient, UpstreamClient

logger = logging.getLogger("switchyard.gateway")
_encode = msgspec.json.encode
# uvicorn has let open connections finish before shutdown starts: what is left is their settling
_SHUTDOWN_SETTLE_S = 5.0
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def build_pipeline(gateway: Gateway) -> Pipeline:
    """The stages every request runs through, in order."""
    return Pipeline(
        [
            Authenticate(gateway.keys),  # who is calling (401)
            RouteModel(gateway.keys, gateway.classifiers, gateway.caches.sticky),  # which pool (404)
            EnforceLimits(gateway.store, on_reject=gateway.count_rejection),  # may it (429 / 503)
            ResponseCacheStage(gateway.caches.responses, gateway.caches.flights),  # a repeat? (hit)
            EmbeddingCacheStage(gateway.caches.embeddings),  # embeddings we already have
            CallWithRetries(  # which replica (affinity, balancer), call it, retry before the first byte
                PickReplica(
                    gateway.balancer, gateway.caches.affinity, on_event=gateway.metrics.cache_hook("affinity")
                ),
                CallUpstream(gateway.client, gateway.balancer),
                on_attempt_error=gateway.metrics.count_upstream_error,  # retried attempts count too
            ),
        ]
    )


class Gateway:
    """The gateway's runtime: the serving policy, replica state, upstream client and metrics."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: UpstreamClient,
        reloader: PolicyReloader,
        metrics: Metrics,
        store: Store | None = None,
        caches: Caches | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.reloader = reloader
        self.metrics = metrics
        self.store = store or build_store(reloader.policy, on_fallback=self._count_fallback)
        self.keys = KeyIndexCache()
        self.classifiers = ClassifierCache()
        self.caches = caches or build_caches(reloader.policy, metrics)
        self.balancer = Balancer()
        self.health = HealthChecker(self.balancer, client)
        self.reloader.subscribe(self.balancer.update)
        self.reloader.subscribe(self._count_reload)
        self.pipeline = build_pipeline(self)
        self.inflight = InFlight()
        """Proxied requests whose response or after-response work is not over (gateway.proxy counts)."""
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(6).hex()
        self._models_cache: tuple[Policy, bytes] | None = None

    @property
    def policy(self) -> Policy:
        return self.reloader.policy

    def _count_reload(self, policy: Policy) -> None:
        self.metrics.policy_reloads.labels("adopted").inc()

    async def settle(self) -> None:
        """Wait until every open request's after-response work has run, then have the store write what
        it batched: from then on the store, caches and metrics show every request answered so far.
        (A drain before shutdown; tests call it instead of guessing how long that work takes.)"""
        await self.inflight.wait_idle()
        await self.store.flush()

    def _count_fallback(self, reason: str) -> None:
        self.metrics.store_fallbacks.labels(reason).inc()

    def count_rejection(self, reason: str) -> None:
        self.metrics.rate_limited.labels(reason).inc()

    def authenticate(self, headers: Mapping[str, str]) -> ApiKey | None:
        """The caller's key for the non-pipeline endpoints (models, usage)."""
        policy = self.reloader.policy
        token = bearer_token(headers.get("authorization"))
        key = self.keys.get(policy).lookup(token) if token is not None else None
        if key is None and policy.auth.required:
            raise AuthenticationFailed(
                "Incorrect API key provided." if token else "You didn't provide an API key."
            )
        return key

    def request_id(self, headers: Mapping[str, str]) -> str:
        """The client's ``x-request-id`` when it is sane, else a fresh one (a counter, not a uuid)."""
        given = headers.get("x-request-id")
        if given and len(given) <= 128 and given.isascii() and given.isprintable():
            return given
        return f"{self._id_prefix}{next(self._ids):x}"

    async def handle(
        self, endpoint: Endpoint, headers: Mapping[str, str], raw: bytes, request_id: str
    ) -> tuple[Call | None, BytesResult | StreamResult | GatewayError]:
        """Decode one proxied API request and run it through the pipeline."""
        started = time.perf_counter()
        policy = self.reloader.policy
        call: Call | None = None
        try:
            if len(raw) > policy.limits.max_body_bytes:
                raise BodyTooLarge(f"Request body is over the limit of {policy.limits.max_body_bytes} bytes.")
            body, parsed = parse_body(endpoint, raw)
            is_stream = False
            include_usage = False
            if isinstance(parsed, ChatRequest | CompletionRequest):
                is_stream = bool(parsed.stream)
                include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
            call = Call(
                endpoint,
                body,
                headers,
                policy,
                request_id,
                parsed.model,
                is_stream=is_stream,
                include_usage=include_usage,
                started_at=started,
            )
            call.on_finish(self._record)
            result = await self.pipeline.run(call)
            for result_filter in call.result_filters:
                result = await result_filter(call, result)
            return call, result
        except asyncio.CancelledError:  # the client left; the pipeline finished the call unless a filter ran
            if call is not None:
                await call.finish(ClientDisconnected("The client closed the connection."))
            raise
        except GatewayError as error:
            if call is None:
                self.metrics.count_request(endpoint.name.lower(), "-", status_of(error))
            return call, error

    async def _record(self, call: Call, error: GatewayError | None) -> None:
        self.metrics.record_call(call, error)

    def _error_response(self, error: GatewayError, request_id: str) -> Response[bytes]:
        status, body, headers = render(error)
        return Response(
            content=body,
            status_code=status,
            media_type=MediaType.JSON,
            headers={"x-request-id": request_id, **headers},
        )

    def models_body(self, key: ApiKey | None) -> bytes:
        policy = self.reloader.policy
        if key is not None and (key.pools or key.models):
            index = self.keys.get(policy)
            names = [m for m in policy.model_names() if index.may_use(key, m, policy.pool_for_model(m) or "")]
            return _encode({"object": "list", "data": [_model_card(name) for name in names]})
        if self._models_cache is None or self._models_cache[0] is not policy:
            data = [_model_card(name) for name in policy.model_names()]
            self._models_cache = (policy, _encode({"object": "list", "data": data}))
        return self._models_cache[1]


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "switchyard"}


def _http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
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
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    logger.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    status, body, headers = render(GatewayError("The server had an error processing your request."))
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)


def create_app(
    settings: Settings | None = None,
    *,
    client: UpstreamClient | None = None,
    reloader: PolicyReloader | None = None,
    metrics: Metrics | None = None,
    store: Store | None = None,
) -> ProxyApp:
    """Build the gateway app. Everything not given is built from ``settings``."""
    settings = settings or Settings.from_env()
    reloader = reloader or PolicyReloader(
        settings.policy_path, overlay=settings.overlay_path, poll_interval_s=settings.reload_interval_s
    )
    client = client or AiohttpUpstreamClient(max_connections=settings.max_upstream_connections)
    gateway = Gateway(settings, client=client, reloader=reloader, metrics=metrics or Metrics(), store=store)

    @get("/v1/models")
    async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
        try:
            key = gateway.authenticate(request.headers)
        except GatewayError as error:
            return gateway._error_response(error, "-")
        return Response(content=gateway.models_body(key), media_type=MediaType.JSON)

    @get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request[Any, Any, Any], model_id: str) -> Response[bytes]:
        model_id = model_id.lstrip("/")
        try:
            key = gateway.authenticate(request.headers)
            pool = gateway.policy.pool_for_model(model_id)
            if pool is None or (
                key is not None and not gateway.keys.get(gateway.policy).may_use(key, model_id, pool)
            ):
                raise ModelNotFound.for_model(model_id)
        except GatewayError as error:
            return gateway._error_response(error, "-")
        return Response(content=_encode(_model_card(model_id)), media_type=MediaType.JSON)

    @get("/v1/usage")
    async def usage(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Spend and tokens per tenant, key and pool for a month (``?month=2026-11``); admin keys only."""
        try:
            key = gateway.authenticate(request.headers)
            if key is None or not key.admin:
                raise PermissionDenied("Reading usage needs an admin key.", code="admin_key_required")
            month = request.query_params.get("month") or month_of(time.time())
            if not _MONTH.match(month):
                raise InvalidRequest("month: expected YYYY-MM.", param="month")
            tenant = request.query_params.get("tenant")
            report = await gateway.store.usage(month, tenant)
        except StoreUnavailable:
            return gateway._error_response(
                ServiceUnavailable(
                    "Usage store unavailable.", code="store_unavailable", headers={"Retry-After": "1"}
                ),
                "-",
            )
        except GatewayError as error:
            return gateway._error_response(error, "-")
        return Response(content=_encode(report), media_type=MediaType.JSON)

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz")
    async def readyz() -> Response[bytes]:
        checks = {
            "policy": True,
            "store": await gateway.store.ping(),
            "replica": gateway.balancer.has_healthy(),
        }
        ready = all(checks.values())
        return Response(
            content=_encode({"status": "ready" if ready else "not ready", "checks": checks}),
            status_code=200 if ready else 503,
            media_type=MediaType.JSON,
        )

    @get("/metrics")
    async def metrics_endpoint() -> Response[bytes]:
        gateway.balancer.breaker_states()  # lets breakers whose open time passed turn half-open
        gateway.metrics.update_replicas(gateway.balancer.all_replicas())
        # the content type already names its charset; Litestar would append a second one to a text/ type
        return Response(
            content=gateway.metrics.render(), headers={"content-type": gateway.metrics.content_type}
        )

    async def on_startup() -> None:
        reloader.start()
        gateway.health.start()

    async def on_shutdown() -> None:
        try:
            async with asyncio.timeout(_SHUTDOWN_SETTLE_S):
                await gateway.settle()
        except (TimeoutError, StoreUnavailable) as exc:
            logger.warning("shutting down before every request settled: %r", exc)
        await reloader.stop()
        await gateway.health.stop()
        await client.close()
        await gateway.store.close()
        await gateway.caches.close()

    app = _MsgspecOnlyLitestar(
        route_handlers=[
            list_models,
            usage,
            retrieve_model,
            healthz,
            readyz,
            metrics_endpoint,
            openapi_route(),  # GET /openapi.json, built once here
        ],
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        logging_config=None,
        openapi_config=None,
        request_max_body_size=settings.hard_max_body_bytes,
    )
    app.state.gateway = gateway
    return ProxyApp(gateway, app)


class _MsgspecOnlyLitestar(Litestar):
    """Litestar without the plugins it adds when pydantic or attrs happen to be installed.

    Our handlers speak msgspec only; where pydantic is importable (the openai SDK brings it into a dev
    install) Litestar's defaults import it: ~8 MiB more per worker for nothing.
    """

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins


__all__ = ["EmbeddingRequest", "Gateway", "build_pipeline", "create_app"]
