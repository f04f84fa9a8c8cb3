"""What the gateway knows about one replica: its config, load, breaker, counters and recent latency.

One ``ReplicaState`` per (pool, URL, model) survives policy reloads (``gateway.replicas.balancer``
keeps them), so a reload neither forgets an open breaker nor resets in-flight counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.adapters import Adapter, build_adapter
from gateway.replicas.breaker import Breaker
from gateway.replicas.config import HealthConfig
from gateway.replicas.latency import LatencyWindow
from gateway.replicas.pools import Replica

__all__ = ["ReplicaState"]


@dataclass(slots=True, eq=False)
class ReplicaState:
    """A replica plus what the gateway has learned about it (identity-compared, hashable)."""

    pool: str
    replica: Replica
    api_key: str | None = None
    outstanding: int = 0
    num_requests: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    breaker: Breaker = field(default_factory=Breaker)
    health: HealthConfig = field(default_factory=HealthConfig)
    """The active checks that apply to this replica (its pool's)."""
    adapter: Adapter = field(default_factory=lambda: build_adapter("openai"))
    """Speaks the replica's kind's API (``gateway.adapters``); set from the replica at each reload."""
    root: str = ""
    """The server root: ``base_url`` without its ``/v1`` (``balancer.server_root``), where a kind's native
    routes and pass-through routes go; set at each reload, not worked out per request."""
    health_url: str = ""
    metrics_url: str = ""
    scrape_interval_s: float = 0.0
    """Resolved: the pool's, or 2 s for a ``load_aware`` pool; 0 = no scrapes."""
    current_weight: float = 0.0
    """Smooth weighted round robin's running weight."""
    num_waiting: float = 0.0
    """Scraped: requests queued on the replica (vLLM ``vllm:num_requests_waiting``; each kind's own)."""
    num_running: float = 0.0
    """Scraped: requests it is generating."""
    kv_cache_usage: float = 0.0
    """Scraped: how full its KV cache is (0..1)."""
    load_fresh_until: float = -math.inf
    """The scraped figures count until this clock time."""
    outstanding_at_scrape: int = 0
    """This gateway's requests in flight when the latest scrape was sent: the part of the scraped
    running count that was its own. What the replica runs beyond that is every other gateway's
    (:meth:`others_running`); ours since then are in ``outstanding``, live."""
    num_successes: int = 0
    num_failures: int = 0
    rtt_s: float | None = None
    """The health probes' smoothed round trip (None until one answered): how far the replica is, for
    region ranking (``gateway.replicas.regions``)."""
    latency: LatencyWindow = field(default_factory=LatencyWindow)
    """Recent answers' time to first byte (``Balancer.record_success``), for the console."""

    @property
    def label(self) -> str:
        return self.replica.label

    def others_running(self) -> float:
        """Requests the replica ran for other gateways at the latest scrape: its running count less ours
        then. Ours are counted live instead, so one of ours that ends between scrapes stops counting at
        once and does not pass for load until the next scrape."""
        return max(0.0, self.num_running - self.outstanding_at_scrape)

    def is_healthy(self, now: float) -> bool:
        """Its breaker is not open (half-open takes trial requests)."""
        return self.breaker.is_up(now)

    def acquire(self) -> None:
        self.outstanding += 1
        self.num_requests += 1

    def release(self) -> None:
        self.outstanding -= 1
