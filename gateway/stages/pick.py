"""Pick the replica of the pool that will serve the call: prefix affinity first, then the balancer.

With affinity on (and more than one replica), the request's leading content is hashed in chained
chunks and looked up in the shared prefix map: the replica that served the longest matching prefix
is preferred (its engine's KV prefix cache holds it) unless its load exceeds the pool's average by
the policy's factor, in which case the balancer's choice wins and the mapping moves. The mapping is
recorded when the call succeeds. Replicas that take a ``cache_salt`` get the tenant's salt, so an
engine's prefix cache never crosses tenants. Where the pool's engines publish KV-cache events
(``kv_routing``), ``gateway.kv_routing`` chooses by the blocks each replica holds instead of guessing,
and says so in ``x-sortyard-route-reason`` (``kv:8/10 blocks@large-1``).

A pool with a ``queue`` (``routing.pools.<name>.queue``) that is saturated, fallbacks included, makes
the call's first attempt wait its turn for a slot (``gateway.replicas.slot_queue``): in its priority
class (the policy's ``priority`` for its key or tenant; a client's own may only make it later), by its
tenant's ``weight``. The wait ends at ``max_wait_s`` or the call's ``total_s`` deadline, whichever
comes first (503 ``pool_saturated``); a tenant with ``max_queued_per_tenant`` requests waiting already
gets 429 ``queue_full``. Retries never wait: the call holds its first replica's slot until it ends.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable

from gateway.cache import EVENT_OF_REASON, AffinityMap, cache_salt, choose_replica, prefix_chain
from gateway.errors import GatewayError, RateLimited, ServiceUnavailable
from gateway.kv_routing.router import KvRouter, kv_route_reason
from gateway.kv_routing.scorer import KvChoice
from gateway.pipeline import Call, Endpoint
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.config import QueueConfig
from gateway.replicas.slot_queue import QueueFull, QueueTimeout, SlotQueues, Ticket
from gateway.stages.region_origin import RegionObserver, origin_of, report_region

logger = logging.getLogger("sortyard.pick")


class PickReplica:
    """``call.pool`` -> ``call.replica``. Called once per upstream attempt (by the retry stage)."""

    name = "pick"

    def __init__(
        self,
        balancer: Balancer,
        affinity: AffinityMap | None = None,
        *,
        on_event: Callable[[str], None] | None = None,
        environ: dict[str, str] | None = None,
        queues: SlotQueues | None = None,
        kv: KvRouter | None = None,
        on_region: RegionObserver | None = None,
    ) -> None:
        self.balancer = balancer
        self.on_region = on_region
        """Told how each pick in a pool with regions went (metrics)."""
        self.affinity = affinity
        self.kv = kv
        """KV-cache-aware picks where a pool's engines publish KV events (else affinity decides)."""
        self.queues = queues or SlotQueues(balancer)
        """The fair queues of saturated pools whose policy has a ``queue``."""
        self.on_event = on_event
        self._environ = environ if environ is not None else os.environ
        self._salts: dict[tuple[str, str], str] = {}
        self._random_secret = secrets.token_hex(16)
        self._warned_secret = False

    async def __call__(self, call: Call, exclude: tuple[ReplicaState, ...] = ()) -> None:
        assert call.pool is not None
        config = call.policy.cache.affinity
        prefer: str | None = None
        if (
            self.affinity is not None
            and call.endpoint not in (Endpoint.EMBEDDINGS, Endpoint.PASSTHROUGH)  # nothing prefilled
            and call.policy.cache.affinity_enabled_for(call.pool)
            and len(self.balancer.replicas(call.pool)) > 1
        ):
            prefer = await self._preferred(call, exclude)
        queue = call.policy.routing.for_pool(call.pool).queue
        origin = origin_of(call)  # the client's region (trusted header), else this gateway's
        if queue is not None and call.attempts <= 1:  # saturated: wait for a slot, in fair share
            state = await self._wait_for_slot(call, queue, prefer, origin)
        else:  # the pool, then its fallbacks (large -> medium -> small) when none of it can serve
            state = self.balancer.pick_first(
                self.balancer.pool_order(call.pool), exclude, prefer=prefer, origin=origin
            )
        if state is None:
            raise ServiceUnavailable(
                f"No healthy replica in pool `{call.pool}` or its fallbacks; try again shortly.",
                code="no_healthy_replica",
                headers={"Retry-After": "1"},
            )
        call.replica = state
        if self.balancer.last_region_pick is not None:  # a pool with regions: which served, and why
            report_region(call, state.pool, self.balancer.last_region_pick, self.on_region)
        if state.pool != call.pool:
            call.response_headers["x-sortyard-fallback-pool"] = state.pool
        if state.replica.send_cache_salt and config.salt_requests:
            call.body["cache_salt"] = self._salt(call.tenant, config.salt_secret_env)
        else:
            call.body.pop("cache_salt", None)  # a retry may land on a replica that takes none

    async def _wait_for_slot(
        self, call: Call, config: QueueConfig, prefer: str | None, origin: str | None
    ) -> ReplicaState | None:
        """A replica below its cap, at once or after waiting in the pool's fair queue."""
        assert call.pool is not None
        policy = call.policy
        priority = call.priority
        tenant = policy.tenants.get(call.tenant)
        ticket = Ticket(
            call.tenant,
            0 if priority is None else priority,
            tenant.weight if tenant is not None else 1.0,
            config.interactive_reserve if call.is_background else 0,
        )
        timeout_s = min(config.max_wait_s, call.deadline - time.perf_counter())  # waiting spends it
        try:
            return await self.queues.take(call.pool, ticket, config, timeout_s, prefer=prefer, origin=origin)
        except QueueFull:
            raise RateLimited(
                f"Too many of your requests are waiting for pool `{call.pool}` "
                f"(at most {config.max_queued_per_tenant}); try again shortly.",
                code="queue_full",
                headers={"Retry-After": "1"},
            ) from None
        except QueueTimeout:
            raise ServiceUnavailable(
                f"Pool `{call.pool}` and its fallbacks stayed saturated while the request waited; "
                "try again shortly.",
                code="pool_saturated",
                headers={"Retry-After": "1"},
            ) from None

    async def _preferred(self, call: Call, exclude: tuple[ReplicaState, ...]) -> str | None:
        """The replica label prefix affinity prefers, unless it is overloaded (then None)."""
        assert self.affinity is not None and call.pool is not None
        if self.kv is not None:  # the engines say where the blocks are: no guessing
            choice = await self._kv_choice(call, exclude)
            if choice is not None:
                return choice.label
        config = call.policy.cache.affinity
        chain = prefix_chain(call.body, chunk_bytes=config.chunk_bytes, max_chunks=config.max_chunks)
        if not chain:
            return None
        label, _matched = await self.affinity.lookup(call.tenant, call.pool, chain)
        candidates = self.balancer.candidates(call.pool, exclude)
        reason = "no_affinity"
        if label is not None and candidates:
            _, reason = choose_replica(
                [(s.label, self.balancer.load(s)) for s in candidates],
                label,
                config.max_load_factor,
                config.min_load_excess,
            )
        if self.on_event is not None:
            self.on_event(EVENT_OF_REASON[reason])
        affinity, pool, tenant, ttl_s = self.affinity, call.pool, call.tenant, config.ttl_s

        async def record(call: Call, error: GatewayError | None) -> None:
            if error is None and call.replica is not None and call.replica.pool == pool:
                await affinity.record(tenant, pool, chain, call.replica.label, ttl_s)

        call.on_finish(record)
        return label if reason == "affinity" else None

    async def _kv_choice(self, call: Call, exclude: tuple[ReplicaState, ...]) -> KvChoice | None:
        """The KV scorer's choice (its label None: the balancer's), or None when no KV events steer it."""
        assert self.kv is not None and call.pool is not None
        pool_config = call.policy.kv_routing.pools.get(call.pool)
        if pool_config is None or not pool_config.enabled:  # the common case: no load or salts to work out
            return None
        balancer = self.balancer
        states = balancer.candidates(call.pool, exclude)
        candidates = [(s.label, balancer.requests(s)) for s in states]
        config = call.policy.cache.affinity
        salts = {  # the blocks that count are those cached for the salt the request would carry there
            s.label: self._salt(call.tenant, config.salt_secret_env)
            for s in states
            if s.replica.send_cache_salt and config.salt_requests
        }
        choice = await self.kv.choose(call.policy.kv_routing, call.pool, call.body, candidates, salts)
        if choice is None:
            return None
        call.route_reason = kv_route_reason(call.route_reason, choice.reason)
        call.response_headers["x-sortyard-route-reason"] = call.route_reason
        return choice

    def _salt(self, tenant: str, secret_env: str | None) -> str:
        secret = self._environ.get(secret_env) if secret_env else None
        if not secret:
            if not self._warned_secret:
                logger.warning(
                    "%s is unset: cache salts are random per process; set it on every "
                    "gateway replica so engines' prefix caches match",
                    secret_env,
                )
                self._warned_secret = True
            secret = self._random_secret
        key = (tenant, secret)
        salt = self._salts.get(key)
        if salt is None:
            salt = self._salts[key] = cache_salt(tenant, secret)
        return salt
