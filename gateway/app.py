"""The app, assembled: the pipeline's declared order, the running gateway, the proxy and the routes.

``create_app(settings, *, client=None, reloader=None, metrics=None, store=None)`` builds everything;
every I/O seam (the upstream client, the policy source, the store) can be injected. The three
proxied API endpoints are served straight from ASGI by ``gateway.proxy`` (the hot path, and the one
owner of a request's path), and ``GET /v1/ws`` by ``gateway.websocket``; everything else (models,
usage, health, metrics, and every error for unknown routes) is a Litestar route of ``gateway.routes``.
"""

from __future__ import annotations

import asyncio
import logging

from litestar import Litestar
from litestar.exceptions import HTTPException
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin

from gateway.anthropic.exchange import MessagesExchange
from gateway.anthropic.routes import messages_routes
from gateway.audit import SYSTEM, AuditTrail
from gateway.audit.factory import build_audit_store
from gateway.audit.policy_diff import PolicyReloadAudit
from gateway.batches import BatchFeature
from gateway.cache import ResponseCache
from gateway.client_limits import ClientLimiter
from gateway.guardrails.guard import Guardrails
from gateway.instance import Gateway
from gateway.keys import KeyRegistry
from gateway.kv_routing.router import KvRouter
from gateway.lifecycle import Observer
from gateway.openapi import openapi_route
from gateway.pipeline import Pipeline
from gateway.proxy import ProxyApp
from gateway.reloader import PolicyReloader
from gateway.replicas.balancer import Balancer
from gateway.replicas.client import UpstreamClient
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.replicas.slot_queue import SlotQueues
from gateway.routes import api_routes, http_exception, open_route_limit, unexpected
from gateway.semantic_cache import QueryEmbedder
from gateway.settings import Settings
from gateway.sso import SingleSignOn
from gateway.stages.cache import ResponseCacheStage
from gateway.stages.conversation import ContinueConversation
from gateway.stages.embeddings import EmbeddingCacheStage
from gateway.stages.guardrails import GuardrailsStage
from gateway.stages.limits import EnforceLimits
from gateway.stages.pick import PickReplica
from gateway.stages.retry import CallWithRetries
from gateway.stages.route import RouteModel
from gateway.stages.semantic_cache import SemanticCacheStage
from gateway.stages.upstream import CallUpstream
from gateway.state_factories import Caches, build_caches, build_key_store, build_store
from gateway.stores import Store, StoreUnavailable
from gateway.telemetry.guardrails import GuardrailMetrics
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.regions import RegionMetrics
from gateway.tls import upstream_context
from gateway.websocket import WebSocketEndpoint

logger = logging.getLogger("sortyard.gateway")
# uvicorn has let open connections finish before shutdown starts: what is left is their settling
_SHUTDOWN_SETTLE_S = 5.0


def build_pipeline(
    *,
    store: Store,
    caches: Caches,
    balancer: Balancer,
    client: UpstreamClient,
    metrics: Metrics,
    kv: KvRouter | None = None,
) -> Pipeline:
    """The stages every request runs through, in order, once its caller is known
    (``gateway.lifecycle`` authenticates before it reads the body), and the finishers every request
    ends with.

    Stages add their own after-response work when it applies: limits settle the reservation,
    the response cache taps a stream (a result filter) and stores the entry, the embeddings cache
    merges its hits back in (a result filter), the replica is released and affinity recorded.
    """
    # one embedder: the semantic cache's prompts and the embeddings classifier's share its vector cache
    vectors = ResponseCache(caches.responses.blobs, on_event=metrics.cache_hook("semantic_vectors"))
    embedder = QueryEmbedder(client, balancer, vectors)
    return Pipeline(
        [
            ContinueConversation(
                caches.stored_responses
            ),  # Responses only: previous_response_id; stores after
            RouteModel(caches.sticky, embedder),  # which pool (404); kind: embeddings embeds the prompt
            EnforceLimits(store, on_reject=metrics.count_rejection),  # may it (429 / 503); settles after
            GuardrailsStage(  # the pool's and key's guardrails: redact or block (400); the answer's after
                Guardrails(client), on_action=GuardrailMetrics(metrics.registry).count
            ),
            ResponseCacheStage(caches.responses, caches.flights),  # a repeat? (hit); stores after
            SemanticCacheStage(  # a paraphrase of an answered prompt? (semantic-hit, opt-in); stores after
                caches.semantic,
                embedder,
                observe_lookup_s=metrics.observe_semantic_lookup,
            ),
            EmbeddingCacheStage(caches.embeddings),  # embeddings we already have; merges after
            CallWithRetries(  # which replica (affinity, balancer), call it, retry before the first byte
                PickReplica(  # a saturated pool with a queue: wait for a slot, in fair share per tenant
                    balancer,
                    caches.affinity,
                    on_event=metrics.cache_hook("affinity"),
                    queues=SlotQueues(balancer, observer=metrics),
                    kv=kv,  # where engines publish KV events: pick by the blocks they hold
                    on_region=RegionMetrics(metrics.registry).count,  # pools whose replicas name regions
                ),
                CallUpstream(client, balancer),  # releases the replica after
                on_attempt_error=metrics.count_upstream_error,  # retried attempts count too
            ),
        ],
        finishers=[metrics.record],  # requests, latency, tokens: once the response is over
    )


def create_app(
    settings: Settings | None = None,
    *,
    client: UpstreamClient | None = None,
    reloader: PolicyReloader | None = None,
    metrics: Metrics | None = None,
    store: Store | None = None,
    audit: AuditTrail | None = None,
) -> ProxyApp:
    """Build the gateway app. Everything not given is built from ``settings``."""
    settings = settings or Settings.from_env()
    reloader = reloader or PolicyReloader(
        settings.policy_path, overlay=settings.overlay_path, poll_interval_s=settings.reload_interval_s
    )
    client = client or Http1UpstreamClient(
        max_connections=settings.max_upstream_connections,
        keepalive_s=settings.upstream_keepalive_s,
        ssl_context=upstream_context(settings),
    )
    metrics = metrics or Metrics()
    store = store or build_store(reloader.policy, on_fallback=metrics.count_store_fallback)
    caches = build_caches(reloader.policy, metrics)
    balancer = Balancer(region=settings.region)
    clients = ClientLimiter(store, on_refuse=metrics.count_client_refusal)
    keys = KeyRegistry(build_key_store(reloader.policy, settings), refresh_s=settings.keys_refresh_s)
    kv = KvRouter(on_decision=lambda pool, outcome: metrics.kv_decisions.labels(pool, outcome).inc())
    reloader.subscribe(lambda compiled: kv.update(compiled.policy.kv_routing))  # now, and on each reload
    audit = audit or AuditTrail(build_audit_store(reloader.policy, settings))
    reload_audit = PolicyReloadAudit(audit, str(reloader.path))
    reloader.subscribe(reload_audit)  # each adopted reload with its diff, each refused one
    reloader.refusal_listeners.append(reload_audit.refused)
    pipeline = build_pipeline(
        store=store,
        caches=caches,
        balancer=balancer,
        client=client,
        metrics=metrics,
        kv=kv,
    )
    gateway = Gateway(
        settings,
        client=client,
        reloader=reloader,
        metrics=metrics,
        store=store,
        caches=caches,
        balancer=balancer,
        pipeline=pipeline,
        clients=clients,
        keys=keys,
    )

    async def on_startup() -> None:
        reloader.start()
        kv.start()
        gateway.health.start()
        await keys.start()

    async def on_shutdown() -> None:
        try:
            async with asyncio.timeout(_SHUTDOWN_SETTLE_S):
                await gateway.settle()
        except (TimeoutError, StoreUnavailable) as exc:
            logger.warning("shutting down before every request settled: %r", exc)
        if gateway.drain_source == "signal":  # told to stop (SIGTERM); the admin API records its own
            await audit.record(SYSTEM, "drain", reload_audit.process)
        await audit.close()
        await reloader.stop()
        await gateway.health.stop()
        await keys.stop()
        await kv.stop()
        await sso.close()
        await keys.store.close()
        await client.close()
        await store.close()
        await caches.close()

    observer = (
        Observer()
    )  # the proxied requests', the WebSocket's and the batches': one tracer, one access log
    batches = BatchFeature(gateway, observer=observer)
    sso = SingleSignOn()  # bearer JWTs and console sessions, when the policy has an sso section
    app = _MsgspecOnlyLitestar(
        # GET /openapi.json, built once here; counted per client like /metrics
        route_handlers=[
            *api_routes(gateway, audit, sso, reload_audit),
            *messages_routes(gateway),
            *batches.routes,
            openapi_route(before_request=open_route_limit(gateway)),
        ],
        exception_handlers={HTTPException: http_exception, Exception: unexpected},
        on_startup=[on_startup, batches.start],
        on_shutdown=[batches.stop, on_shutdown],  # the runner hands its lines back before the settle
        logging_config=None,
        openapi_config=None,
        request_max_body_size=settings.hard_max_body_bytes,
    )
    app.state.gateway = gateway
    app.state.batches = batches
    return ProxyApp(
        gateway,
        app,
        observer,
        websockets={"/v1/ws": WebSocketEndpoint(gateway, observer)},
        exchanges={"/v1/messages": MessagesExchange},
    )


class _MsgspecOnlyLitestar(Litestar):
    """Litestar without the plugins it adds when pydantic or attrs happen to be installed.

    Our handlers speak msgspec only; where pydantic is importable (the openai SDK brings it into a dev
    install) Litestar's defaults import it: ~8 MiB more per worker for nothing.
    """

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins


__all__ = ["build_pipeline", "create_app"]
