"""Every metric the gateway exports, named in one place.

Each app gets its own ``CollectorRegistry`` so that several apps (tests, workers) never collide.
Labels never carry API keys or prompt content; tenants label token counters only when the policy's
``telemetry.tenant_labels`` allows it. The fair queue's series (``sortyard_queue_*``) are per tenant
always: fair share is per tenant, and they exist only for pools whose policy has a ``queue``.

Several worker processes (``sortyard serve --workers N``): ``Metrics.render()`` answers with the sum
over all workers, whose values live in the directory ``gateway.telemetry.multiprocess`` prepares.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.errors import (
    ClientDisconnected,
    GatewayError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    status_of,
)
from gateway.telemetry.multiprocess import is_multiprocess

if TYPE_CHECKING:
    from gateway.pipeline import Call
    from gateway.replicas.balancer import ReplicaState

BREAKER_STATES = ("closed", "half_open", "open")


def upstream_error_kind(error: GatewayError) -> str | None:
    """The ``kind`` a failed upstream attempt counts under in ``sortyard_upstream_errors_total``
    (its error code; ``upstream_rate_limited`` for an upstream 429), or None when ``error`` is no
    upstream failure (the upstream's own 4xx is the client's problem)."""
    if isinstance(error, UpstreamStatusError):
        return "upstream_rate_limited" if error.upstream_status == 429 else None
    if isinstance(error, UpstreamError | UpstreamTimeout):
        return error.code or "upstream_error"
    return None


TPOT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
QUEUE_WAIT_BUCKETS_S = (0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class Metrics:
    """The gateway's Prometheus metrics."""

    content_type = CONTENT_TYPE_LATEST
    """The exposition's full content type, charset included (send it as is, never append another)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # a ``_created`` twin of every counter and histogram doubles the series for nothing anyone graphs
        disable_created_metrics()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sortyard_requests",
            "Requests answered, by endpoint, pool and HTTP status.",
            ("endpoint", "pool", "status"),
            registry=r,
        )
        self.request_duration = Histogram(
            "sortyard_request_duration_seconds",
            "Total request latency as the client sees it.",
            ("endpoint", "pool"),
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "sortyard_time_to_first_token_seconds",
            "Time to the first streamed event.",
            ("pool",),
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.overhead = Histogram(
            "sortyard_gateway_overhead_seconds",
            "Request time not spent waiting on the upstream.",
            ("endpoint",),
            buckets=OVERHEAD_BUCKETS_S,
            registry=r,
        )
        self.tokens = Counter(
            "sortyard_tokens",
            "Tokens reported by upstreams, by pool and direction.",
            ("pool", "direction"),
            registry=r,
        )
        self.upstream_errors = Counter(
            "sortyard_upstream_errors",
            "Failed upstream attempts (retried ones and broken streams included) by pool and kind, "
            "plus requests that found no replica (kind no_healthy_replica) or failed in the gateway.",
            ("pool", "kind"),
            registry=r,
        )
        self.stream_errors = Counter(
            "sortyard_stream_errors",
            "Streams that failed after their first event (the client saw 200, then an error event).",
            ("pool", "kind"),
            registry=r,
        )
        self.replica_outstanding = Gauge(
            "sortyard_replica_outstanding_requests",
            "Requests in flight per replica.",
            ("pool", "replica"),
            registry=r,
            multiprocess_mode="livesum",
        )
        self.time_per_output_token = Histogram(
            "sortyard_time_per_output_token_seconds",
            "Streamed responses: time after the first token, per further output token.",
            ("pool",),
            buckets=TPOT_BUCKETS_S,
            registry=r,
        )
        self.tenant_tokens = Counter(
            "sortyard_tenant_tokens",
            "Tokens by tenant, pool and direction (only when the policy's telemetry.tenant_labels is on).",
            ("tenant", "pool", "direction"),
            registry=r,
        )
        self.replica_breaker_state = Gauge(
            "sortyard_replica_breaker_state",
            "1 for the circuit-breaker state each replica is in (closed, half_open, open), else 0.",
            ("pool", "replica", "state"),
            registry=r,
            multiprocess_mode="livemax",
        )
        self.replica_load = Gauge(
            "sortyard_replica_load",
            "A replica's load as last scraped from its /metrics (running, waiting, kv_cache_usage).",
            ("pool", "replica", "signal"),
            registry=r,
            multiprocess_mode="livemax",
        )
        self.rate_limited = Counter(
            "sortyard_rate_limited",
            "Requests refused by limits, by reason.",
            ("reason",),
            registry=r,
        )
        self.client_rate_limited = Counter(
            "sortyard_client_rate_limited",
            "Unauthenticated requests refused per client address, by reason (auth_failures: past the "
            "failed-authentication bound; open_routes: past the /metrics and /openapi.json bound).",
            ("reason",),
            registry=r,
        )
        self.store_fallbacks = Counter(
            "sortyard_store_fallbacks",
            "Store operations answered by the local fallback because Redis failed.",
            ("reason",),
            registry=r,
        )
        self.cache_events = Counter(
            "sortyard_cache_events",
            "Cache events by cache and kind (hit, miss, bypass, store, evict, oversize, corrupt, error, "
            "affinity_hit, affinity_override, affinity_miss, flight_follow, ...).",
            ("cache", "event"),
            registry=r,
        )
        self.semantic_lookup = Histogram(  # hits and misses: sortyard_cache_events{cache="semantic"}
            "sortyard_semantic_cache_lookup_seconds",
            "Semantic-cache lookups: the log pull and the index search, not the embedding call.",
            buckets=OVERHEAD_BUCKETS_S,
            registry=r,
        )
        self.kv_decisions = Counter(
            "sortyard_kv_route_decisions",
            "KV-cache-aware picks by pool, outcome: hit, override (load beat blocks), miss (none held).",
            ("pool", "outcome"),
            registry=r,
        )
        self.queue_depth = Gauge(
            "sortyard_queue_depth",
            "Requests waiting in a saturated pool's fair queue, by pool and tenant.",
            ("pool", "tenant"),
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_wait = Histogram(
            "sortyard_queue_wait_seconds",
            "Time a request waited for a replica slot in its pool's fair queue (0: served at once).",
            ("pool", "tenant"),
            buckets=QUEUE_WAIT_BUCKETS_S,
            registry=r,
        )
        self.queue_refused = Counter(
            "sortyard_queue_refused",
            "Requests the fair queue turned away: full (429 queue_full), timeout (503 pool_saturated).",
            ("pool", "tenant", "reason"),
            registry=r,
        )
        self.policy_reloads = Counter(
            "sortyard_policy_reloads",
            "Policy reload attempts by result.",
            ("result",),
            registry=r,
        )

        self._children: dict[tuple[object, ...], Any] = {}
        if is_multiprocess():  # a worker's live gauges leave with it
            atexit.register(multiprocess.mark_process_dead, os.getpid())

    # the hot path: labelled children are cached (prometheus_client's .labels() locks and validates)
    def count_request(self, endpoint: str, pool: str, status: int) -> None:
        key = ("requests", endpoint, pool, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.requests.labels(endpoint, pool, str(status))
        child.inc()

    def count_rejection(self, reason: str) -> None:
        """A request the limits refused (``requests``, ``tokens``, ``concurrency``, ``budget``)."""
        self.rate_limited.labels(reason).inc()

    def count_client_refusal(self, reason: str) -> None:
        """A client refused by the limits on unauthenticated work (``auth_failures``, ``open_routes``)."""
        self.client_rate_limited.labels(reason).inc()

    def count_store_fallback(self, reason: str) -> None:
        """The store fell back to its local limiter (Redis failed) or came back."""
        self.store_fallbacks.labels(reason).inc()

    # the fair queue's (gateway.replicas.slot_queue.QueueObserver)
    def set_queue_depth(self, pool: str, tenant: str, depth: int) -> None:
        self._child(self.queue_depth, pool, tenant).set(depth)

    def observe_queue_wait(self, pool: str, tenant: str, wait_s: float) -> None:
        self._child(self.queue_wait, pool, tenant).observe(wait_s)

    def count_queue_refusal(self, pool: str, tenant: str, reason: str) -> None:
        self._child(self.queue_refused, pool, tenant, reason).inc()

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    async def record(self, call: Call, error: GatewayError | None) -> None:
        """The pipeline's finisher: ``record_call`` once the call is over."""
        self.record_call(call, error)

    def count_upstream_error(self, pool: str, error: GatewayError) -> None:
        """One failed upstream attempt (``CallWithRetries``' ``on_attempt_error``: the attempts a
        call retried; the one it ends with is counted by :meth:`record_call`)."""
        kind = upstream_error_kind(error)
        if kind is not None:
            self._upstream_error(pool, kind).inc()

    def _upstream_error(self, pool: str, kind: str) -> Any:
        key = ("upstream_errors", pool, kind)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.upstream_errors.labels(pool, kind)
        return child

    def observe_latency(self, endpoint: str, pool: str, total_s: float, overhead_s: float) -> None:
        key = ("latency", endpoint, pool)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.request_duration.labels(endpoint, pool),
                self.overhead.labels(endpoint),
            )
        children[0].observe(total_s)
        children[1].observe(overhead_s)

    def count_tokens(self, pool: str, input_tokens: int, output_tokens: int) -> None:
        key = ("tokens", pool)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.tokens.labels(pool, "input"),
                self.tokens.labels(pool, "output"),
            )
        children[0].inc(input_tokens)
        children[1].inc(output_tokens)

    def observe_stream(self, pool: str, now: float, call: Call) -> None:
        """Time to first token and time per further output token of a streamed response."""
        key = ("stream", pool)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.time_to_first_token.labels(pool),
                self.time_per_output_token.labels(pool),
            )
        assert call.first_token_at is not None
        children[0].observe(call.first_token_at - call.started_at)
        num_tokens = call.usage.output_tokens if call.usage is not None else call.num_events
        if num_tokens > 1:
            children[1].observe((now - call.first_token_at) / (num_tokens - 1))

    def update_replicas(self, states: Iterable[ReplicaState]) -> None:
        """Replica gauges (load, breaker state), read from the balancer when /metrics is scraped."""
        for state in states:
            pool, label = state.pool, state.label
            self.replica_outstanding.labels(pool, label).set(state.outstanding)
            breaker = getattr(state, "breaker", None)
            current = getattr(breaker, "state", None)
            if current is not None:
                for name in BREAKER_STATES:
                    self.replica_breaker_state.labels(pool, label, name).set(1 if current == name else 0)
            for signal, attr in (
                ("running", "num_running"),
                ("waiting", "num_waiting"),
                ("kv_cache_usage", "kv_cache_usage"),
            ):
                value = getattr(state, attr, None)
                if value is not None:
                    self.replica_load.labels(pool, label, signal).set(value)

    def record_call(self, call: Call, error: GatewayError | None) -> None:
        """Everything a finished call tells the metrics (runs once per call, at its end).

        ``pool`` is the pool that served the call: a fallback pool's name when one did (its latency,
        tokens and errors are that pool's), else the pool asked for. ``status`` is what the client
        saw: a stream that broke after its first event is a 200 (its failure is counted in
        ``stream_errors`` and ``upstream_errors``); a client that left before its response, a 499.
        """
        endpoint = call.endpoint.name.lower()
        pool = call.replica.pool if call.replica is not None else call.pool or "-"
        status = 200 if error is None else self._count_error(pool, call, error)
        now = time.perf_counter()
        self.count_request(endpoint, pool, status)
        self.observe_latency(
            endpoint, pool, now - call.started_at, max(0.0, now - call.started_at - call.upstream_s)
        )
        if call.first_token_at is not None:
            self.observe_stream(pool, now, call)
        if call.usage is not None:
            self.count_tokens(pool, call.usage.input_tokens, call.usage.output_tokens)
            if call.compiled.telemetry.tenant_labels:
                self.tenant_tokens.labels(call.tenant, pool, "input").inc(call.usage.input_tokens)
                self.tenant_tokens.labels(call.tenant, pool, "output").inc(call.usage.output_tokens)

    def _count_error(self, pool: str, call: Call, error: GatewayError) -> int:
        """Count a finished call's error; return the status its client saw."""
        if call.first_token_at is not None and not isinstance(error, ClientDisconnected):
            # the stream had started: the client got 200, then an error event and [DONE]
            kind = upstream_error_kind(error) or error.code or "error"
            self.stream_errors.labels(pool, kind).inc()
            self._upstream_error(pool, kind).inc()
            return 200
        status = status_of(error)
        found = upstream_error_kind(error)
        if found is None and status >= 500:  # no replica, store down, a bug: counted here as before
            found = error.code or "error"
        if found is not None:
            self._upstream_error(pool, found).inc()
        return status

    def cache_hook(self, cache: str) -> Callable[..., None]:
        """An ``on_event(name, n=1)`` hook for one cache, counting into ``sortyard_cache_events``."""
        children: dict[str, Any] = {}

        def on_event(event: str, n: int = 1) -> None:
            child = children.get(event)
            if child is None:
                child = children[event] = self.cache_events.labels(cache, event)
            child.inc(n)

        return on_event

    def observe_semantic_lookup(self, seconds: float) -> None:
        self.semantic_lookup.observe(seconds)

    def render(self) -> bytes:
        """The text exposition: this process's registry, or every worker's sum in multi-worker mode."""
        if is_multiprocess():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
