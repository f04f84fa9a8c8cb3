"""Every metric the gateway exports, named in one place.

Each app gets its own ``CollectorRegistry`` so that several apps (tests, workers) never collide.
Labels never carry API keys or prompt content.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.errors import status_of

if TYPE_CHECKING:
    from gateway.errors import GatewayError
    from gateway.pipeline import Call

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class Metrics:
    """The gateway's Prometheus metrics."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "switchyard_requests",
            "Requests answered, by endpoint, pool and HTTP status.",
            ("endpoint", "pool", "status"),
            registry=r,
        )
        self.request_duration = Histogram(
            "switchyard_request_duration_seconds",
            "Total request latency as the client sees it.",
            ("endpoint", "pool"),
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "switchyard_time_to_first_token_seconds",
            "Time to the first streamed event.",
            ("pool",),
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.overhead = Histogram(
            "switchyard_gateway_overhead_seconds",
            "Request time not spent waiting on the upstream.",
            ("endpoint",),
            buckets=OVERHEAD_BUCKETS_S,
            registry=r,
        )
        self.tokens = Counter(
            "switchyard_tokens",
            "Tokens reported by upstreams, by pool and direction.",
            ("pool", "direction"),
            registry=r,
        )
        self.upstream_errors = Counter(
            "switchyard_upstream_errors",
            "Upstream failures by pool and kind.",
            ("pool", "kind"),
            registry=r,
        )
        self.replica_outstanding = Gauge(
            "switchyard_replica_outstanding_requests",
            "Requests in flight per replica.",
            ("pool", "replica"),
            registry=r,
        )
        self.rate_limited = Counter(
            "switchyard_rate_limited",
            "Requests refused by limits, by reason.",
            ("reason",),
            registry=r,
        )
        self.store_fallbacks = Counter(
            "switchyard_store_fallbacks",
            "Store operations answered by the local fallback because Redis failed.",
            ("reason",),
            registry=r,
        )
        self.policy_reloads = Counter(
            "switchyard_policy_reloads",
            "Policy reload attempts by result.",
            ("result",),
            registry=r,
        )

        self._children: dict[tuple[object, ...], Any] = {}

    # the hot path: labelled children are cached (prometheus_client's .labels() locks and validates)
    def count_request(self, endpoint: str, pool: str, status: int) -> None:
        key = ("requests", endpoint, pool, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.requests.labels(endpoint, pool, str(status))
        child.inc()

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

    def record_call(self, call: Call, error: GatewayError | None) -> None:
        """Everything a finished call tells the metrics (runs once per call, at its end)."""
        endpoint = call.endpoint.name.lower()
        pool = call.pool or "-"
        status = 200 if error is None else status_of(error)
        now = time.perf_counter()
        self.count_request(endpoint, pool, status)
        self.observe_latency(
            endpoint, pool, now - call.started_at, max(0.0, now - call.started_at - call.upstream_s)
        )
        if call.first_token_at is not None:
            self.time_to_first_token.labels(pool).observe(call.first_token_at - call.started_at)
        if call.usage is not None:
            self.count_tokens(pool, call.usage.input_tokens, call.usage.output_tokens)
        if error is not None and status >= 500:
            self.upstream_errors.labels(pool, error.code or "error").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
