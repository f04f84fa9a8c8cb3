"""Pick the replica of the pool that will serve the call: prefix affinity first, then the balancer.

With affinity on (and more than one replica), the request's leading content is hashed in chained
chunks and looked up in the shared prefix map: the replica that served the longest matching prefix
is preferred (its engine's KV prefix cache holds it) unless its load exceeds the pool's average by
the policy's factor, in which case the balancer's choice wins and the mapping moves. The mapping is
recorded when the call succeeds. Replicas that take a ``cache_salt`` get the tenant's salt, so an
engine's prefix cache never crosses tenants.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable

from gateway.cache import EVENT_OF_REASON, AffinityMap, cache_salt, choose_replica, prefix_chain
from gateway.errors import GatewayError, ServiceUnavailable
from gateway.pipeline import Call, Endpoint
from gateway.routing.balancer import Balancer, ReplicaState

logger = logging.getLogger("switchyard.pick")


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
    ) -> None:
        self.balancer = balancer
        self.affinity = affinity
        self.on_event = on_event
        self._environ = environ if environ is not None else os.environ
        self._salts: dict[tuple[str, str], str] = {}
        self._random_secret = secrets.token_hex(16)
        self._warned_secret = False

    async def __call__(self, call: Call, exclude: tuple[ReplicaState, ...] = ()) -> None:
        assert call.pool is not None
        state = None
        config = call.policy.cache.affinity
        use_affinity = (
            self.affinity is not None
            and call.endpoint is not Endpoint.EMBEDDINGS
            and call.policy.cache.affinity_enabled_for(call.pool)
            and len(self.balancer.replicas(call.pool)) > 1
        )
        if use_affinity:
            state = await self._by_affinity(call, exclude)
        if state is None:
            state = self.balancer.pick(call.pool, exclude)
        if state is None:
            raise ServiceUnavailable(
                f"No healthy replica in pool `{call.pool}`; try again shortly.",
                code="no_healthy_replica",
                headers={"Retry-After": "1"},
            )
        call.replica = state
        if state.replica.send_cache_salt and config.salt_requests:
            call.body["cache_salt"] = self._salt(call.tenant, config.salt_secret_env)

    async def _by_affinity(self, call: Call, exclude: tuple[ReplicaState, ...]) -> ReplicaState | None:
        assert self.affinity is not None and call.pool is not None
        config = call.policy.cache.affinity
        chain = prefix_chain(call.body, chunk_bytes=config.chunk_bytes, max_chunks=config.max_chunks)
        if not chain:
            return None
        label, _matched = await self.affinity.lookup(call.tenant, call.pool, chain)
        states = [s for s in self.balancer.replicas(call.pool) if s not in exclude]
        chosen: ReplicaState | None = None
        reason = "no_affinity"
        if label is not None and states:
            _, reason = choose_replica(
                [(s.label, float(s.outstanding)) for s in states],
                label,
                config.max_load_factor,
                config.min_load_excess,
            )
            if reason == "affinity":
                preferred = [s for s in states if s.label == label]
                others = tuple(s for s in self.balancer.replicas(call.pool) if s not in preferred)
                chosen = self.balancer.pick(call.pool, others)  # None when the preferred one is down
                if chosen is None:
                    reason = "override"
        if self.on_event is not None:
            self.on_event(EVENT_OF_REASON[reason])
        affinity, pool, tenant, ttl_s = self.affinity, call.pool, call.tenant, config.ttl_s

        async def record(call: Call, error: GatewayError | None) -> None:
            if error is None and call.replica is not None:
                await affinity.record(tenant, pool, chain, call.replica.label, ttl_s)

        call.on_finish(record)
        return chosen

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
