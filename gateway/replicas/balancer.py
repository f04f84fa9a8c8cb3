"""Replica choice inside a pool, per-replica breakers, and pool fallbacks.

``Balancer.pick(pool)`` asks the pool's strategy (``gateway.replicas.strategies``) for a replica
whose circuit breaker (``gateway.replicas.breaker``) lets traffic through; the upstream stage
reports each outcome with ``record_success`` / ``record_failure`` (passive health), and the
active prober (``gateway.replicas.health``) trips and closes breakers and fills in the load the
``load_aware`` strategy reads. ``pick_first(balancer.pool_order(pool))`` walks the pool's
fallbacks (``gateway.replicas.fallback``), skipping saturated pools while another can serve.
``release(state)`` gives a request's replica slot back and tells the release listeners (a pool's
fair queue, ``gateway.replicas.slot_queue``, hands the slot to its next waiting request).

State lives in ``ReplicaState`` objects that survive a policy reload (keyed by pool, URL and
model), so a reload neither forgets an open breaker nor resets in-flight counts. ``pick`` runs
for every request: one pass over the pool, no allocation, no await, no lock.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from gateway.adapters import build_adapter
from gateway.replicas.config import RoutingConfig
from gateway.replicas.fallback import pool_order
from gateway.replicas.pools import Pool, Replica
from gateway.replicas.regions import RegionPick, RegionTable, group_by_region, rank_regions
from gateway.replicas.state import ReplicaState
from gateway.replicas.strategies import ReplicaStrategy, build_strategy, is_usable

__all__ = ["Balancer", "BreakerListener", "ReleaseListener", "ReplicaState", "server_root"]

logger = logging.getLogger("sortyard.routing")

LOAD_AWARE_SCRAPE_INTERVAL_S = 2.0
"""Scrape interval for a ``load_aware`` pool whose health config leaves scraping off."""


class PoolsAndRouting(Protocol):
    """What the balancer reads of a policy: its pools and its ``routing:`` section."""

    @property
    def pools(self) -> Mapping[str, Pool]: ...

    @property
    def routing(self) -> RoutingConfig: ...


BreakerListener = Callable[[ReplicaState, str, str], None]
"""Called with ``(state, old, new)`` when a replica's breaker changes state."""

ReleaseListener = Callable[[ReplicaState], None]
"""Called with the replica whose request just released its slot."""


@dataclass(slots=True, eq=False)
class _Pool:
    states: tuple[ReplicaState, ...]
    strategy: ReplicaStrategy
    cap: int | None
    order: tuple[str, ...]
    regions: dict[str, tuple[ReplicaState, ...]] | None = None
    """Its replicas by region, when any names one (``gateway.replicas.regions``)."""


def server_root(base_url: str) -> str:
    """The server a replica's OpenAI ``base_url`` belongs to: the URL without its ``/v1``, where its
    native routes, health and load pages live. ``http://h:8000/v1`` -> ``http://h:8000``; behind a
    path-routing proxy ``https://gw/tgi/v1`` -> ``https://gw/tgi``; ``http://h:8000`` stays."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


class Balancer:
    """Picks a replica of a pool; holds the per-replica state across policy reloads.

    ``routing``, when given, is used instead of the policy's ``routing`` section (tests, embedding);
    otherwise each adopted policy's own section applies (or the defaults, if it has none).
    """

    def __init__(
        self,
        *,
        routing: RoutingConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        environ: dict[str, str] | None = None,
        region: str | None = None,
        on_breaker_change: BreakerListener | None = None,
    ) -> None:
        self.clock = clock
        self.environ = environ if environ is not None else os.environ
        self.on_breaker_change = on_breaker_change
        self._fixed_routing = routing
        self.routing = routing or RoutingConfig()
        self.pools: dict[str, tuple[ReplicaState, ...]] = {}
        self._pools: dict[str, _Pool] = {}
        self._states: dict[tuple[str, str, str], ReplicaState] = {}
        self._release_listeners: list[ReleaseListener] = []
        self.region = region
        """This gateway's region (``Settings.region``); None: the policy's ``routing.regions.local``."""
        self.regions = RegionTable(self.routing.regions, region or self.routing.regions.local)
        """This gateway's region and the distances between regions (``routing.regions``)."""
        self.last_region_pick: RegionPick | None = None
        """How the latest ``pick`` in a pool with regions went: read it right after the pick (no await
        between), for the response's headers and metrics; None after a pick in a pool without."""

    # -- policy

    def update(self, policy: PoolsAndRouting) -> None:
        """Adopt a new policy's pools and routing, keeping the state of replicas that remain."""
        routing = self._fixed_routing or getattr(policy, "routing", None) or RoutingConfig()
        states: dict[tuple[str, str, str], ReplicaState] = {}
        pools: dict[str, _Pool] = {}
        for pool_name, pool in policy.pools.items():
            overrides = routing.for_pool(pool_name)
            breaker_config = routing.breaker_of(pool_name)
            health = routing.health_of(pool_name)
            strategy_name = routing.strategy_of(pool_name)
            scrape_s = health.scrape_interval_s
            if not scrape_s and strategy_name == "load_aware":
                scrape_s = LOAD_AWARE_SCRAPE_INTERVAL_S
            members = []
            for replica in pool.replicas:
                key = (pool_name, replica.base_url, replica.model)
                state = self._states.get(key) or self._new_state(pool_name, replica)
                state.replica = replica
                state.api_key = self.environ.get(replica.api_key_env) if replica.api_key_env else None
                state.headers = {"Authorization": f"Bearer {state.api_key}"} if state.api_key else {}
                state.breaker.config = breaker_config
                state.health = health
                if state.adapter.kind != replica.kind or state.adapter.chat_template != replica.chat_template:
                    state.adapter = build_adapter(replica.kind, chat_template=replica.chat_template)
                adapter = state.adapter
                root = state.root = server_root(replica.base_url)
                health_path = health.path or adapter.health_path
                state.health_url = overrides.health_urls.get(replica.label) or root + health_path
                state.metrics_url = replica.metrics_url or root + (
                    health.metrics_path or adapter.metrics_path
                )
                state.scrape_interval_s = scrape_s
                states[key] = state
                members.append(state)
            old = self._pools.get(pool_name)
            strategy = (
                old.strategy
                if old is not None
                and old.strategy.name == strategy_name
                and routing.balancer == self.routing.balancer
                else build_strategy(strategy_name, routing.balancer)
            )
            if old is None or old.states != tuple(members):
                for state in members:  # new membership: smooth weighted round robin starts over
                    state.current_weight = 0.0
            order = tuple(p for p in pool_order(routing, pool_name) if p in policy.pools)
            pools[pool_name] = _Pool(
                tuple(members),
                strategy,
                overrides.max_outstanding_per_replica,
                order,
                group_by_region(members),
            )
        self.routing = routing
        local = self.region or routing.regions.local
        homes = (state.replica.region for state in states.values())
        self.regions = RegionTable(routing.regions, local, homes)
        self._states, self._pools = states, pools
        self.pools = {name: pool.states for name, pool in pools.items()}

    def _new_state(self, pool: str, replica: Replica) -> ReplicaState:
        state = ReplicaState(pool, replica)

        def changed(old: str, new: str) -> None:
            log = logger.warning if new == "open" else logger.info
            log("replica %s of pool %s: breaker %s -> %s", state.label, state.pool, old, new)
            if self.on_breaker_change is not None:
                self.on_breaker_change(state, old, new)

        state.breaker.on_change = changed
        return state

    # -- reading

    def replicas(self, pool: str) -> tuple[ReplicaState, ...]:
        return self.pools.get(pool, ())

    def all_replicas(self) -> Iterable[ReplicaState]:
        return self._states.values()

    def pool_order(self, pool: str) -> tuple[str, ...]:
        """``pool`` then its fallbacks (precomputed at each policy update)."""
        entry = self._pools.get(pool)
        return entry.order if entry is not None else (pool,)

    def load(self, state: ReplicaState) -> float:
        """The replica's load as its pool's strategy sees it: in-flight requests (+ scraped load)."""
        entry = self._pools.get(state.pool)
        if entry is None:
            return float(state.outstanding)
        return entry.strategy.load(state, self.clock())

    def requests(self, state: ReplicaState) -> float:
        """Requests on the replica, whatever the strategy: the gateway's own in flight, plus, while a
        scrape is fresh (pools scraped for ``load_aware`` or by ``scrape_interval_s``), what it ran for
        other gateways then and its queue. The KV-aware pick weighs blocks against this: not against
        KV-cache use, which on a prefix-caching engine is what it weighs already."""
        if self.clock() <= state.load_fresh_until:
            return state.outstanding + state.others_running() + state.num_waiting
        return float(state.outstanding)

    def candidates(self, pool: str, exclude: Container[ReplicaState] = ()) -> list[ReplicaState]:
        """The replicas ``pick`` could return now (for affinity: pair each with ``load``)."""
        entry = self._pools.get(pool)
        if entry is None:
            return []
        now = self.clock()
        return [s for s in entry.states if is_usable(s, exclude, now, None)]

    def is_saturated(self, pool: str) -> bool:
        """Every replica the breakers allow has ``max_outstanding_per_replica`` requests in flight."""
        entry = self._pools.get(pool)
        if entry is None or entry.cap is None:
            return False
        now = self.clock()
        return not any(s.outstanding < entry.cap and s.breaker.allows(now) for s in entry.states)

    def num_free_slots(self, pools: Iterable[str]) -> int | None:
        """Requests ``pools`` (e.g. ``pool_order(pool)``) can take before every one is saturated: the
        room below ``max_outstanding_per_replica`` on each replica the breakers allow. None when a pool
        with such a replica has no cap (it is never saturated)."""
        now = self.clock()
        total = 0
        for pool in pools:
            entry = self._pools.get(pool)
            if entry is None:
                continue
            for state in entry.states:
                if not state.breaker.allows(now):
                    continue
                if entry.cap is None:
                    return None
                total += max(0, entry.cap - state.outstanding)
        return total

    def has_usable(self, pools: Iterable[str]) -> bool:
        """Some replica of ``pools`` takes requests now (busy or not); no breaker trial is taken."""
        return any(self.candidates(pool) for pool in pools)

    def has_healthy(self) -> bool:
        """Some replica of some pool has a breaker that is not open."""
        now = self.clock()
        return any(state.breaker.is_up(now) for state in self._states.values())

    def breaker_states(self) -> list[tuple[str, str, str]]:
        """``(pool, replica label, state)`` for every replica, for metrics and ``/readyz``."""
        now = self.clock()
        for state in self._states.values():
            state.breaker.is_up(now)  # let an expired open breaker show as half-open
        return [(s.pool, s.label, s.breaker.state) for s in self._states.values()]

    # -- the hot path

    def pick(
        self,
        pool: str,
        exclude: Container[ReplicaState] = (),
        *,
        prefer: str | None = None,
        saturated_ok: bool = True,
        origin: str | None = None,
    ) -> ReplicaState | None:
        """A usable replica of ``pool`` by its strategy, or None.

        ``exclude``: replicas this call already tried. ``prefer``: a replica label (prefix
        affinity) taken when usable. ``saturated_ok=False`` skips replicas at the pool's
        ``max_outstanding_per_replica``. ``origin``: the request's region (default: this gateway's);
        in a pool whose replicas name regions, only the region chosen for it is considered
        (``gateway.replicas.regions``; ``last_region_pick`` says how).
        """
        entry = self._pools.get(pool)
        if entry is None:
            return None
        now = self.clock()
        cap = None if saturated_ok else entry.cap
        states = entry.states
        self.last_region_pick = None
        if entry.regions is not None:
            ranked = rank_regions(
                self.regions, entry.regions, self.regions.origin(origin), exclude, now, entry.cap
            )
            if ranked is None:
                return None
            states, self.last_region_pick = ranked
        chosen: ReplicaState | None = None
        if prefer is not None:
            for state in states:
                if state.replica.label == prefer:
                    if is_usable(state, exclude, now, cap):
                        chosen = state
                    break
        if chosen is None:
            chosen = entry.strategy.choose(states, exclude, now, cap)
            if chosen is None:
                return None
        chosen.breaker.on_pick(now)
        return chosen

    def pick_first(
        self,
        pools: Iterable[str],
        exclude: Container[ReplicaState] = (),
        *,
        prefer: str | None = None,
        saturated_ok: bool = True,
        origin: str | None = None,
    ) -> ReplicaState | None:
        """The first pool of ``pools`` (e.g. ``pool_order(pool)``) that can serve, unsaturated first.

        A pool with no usable replica, or saturated, passes to the next; when every pool is down or
        saturated, the first one with a usable (saturated) replica serves, unless ``saturated_ok`` is
        False (then None: a queued pool waits instead). ``prefer`` applies to the first pool only.
        """
        order = tuple(pools)
        for busy_ok in (False, True) if saturated_ok else (False,):
            for i, pool in enumerate(order):
                state = self.pick(
                    pool, exclude, prefer=prefer if i == 0 else None, saturated_ok=busy_ok, origin=origin
                )
                if state is not None:
                    return state
            if not any(self._pools[p].cap is not None for p in order if p in self._pools):
                break  # nothing was skipped for saturation: no second pass needed
        return None

    # -- slots and outcomes

    def add_release_listener(self, listener: ReleaseListener) -> None:
        """Call ``listener(state)`` after every :meth:`release`."""
        self._release_listeners.append(listener)

    def release(self, state: ReplicaState) -> None:
        """A request's slot on ``state`` is free again (``state.acquire()`` took it)."""
        state.release()
        for listener in self._release_listeners:
            listener(state)

    def record_success(self, state: ReplicaState, latency_s: float | None = None) -> None:
        """A good answer; ``latency_s``, its time to first byte, joins the replica's recent latency."""
        now = self.clock()
        state.num_successes += 1
        state.breaker.record_success(now)
        if latency_s is not None:
            state.latency.observe(latency_s, now)

    def record_failure(self, state: ReplicaState) -> None:
        state.num_failures += 1
        state.breaker.record_failure(self.clock())
