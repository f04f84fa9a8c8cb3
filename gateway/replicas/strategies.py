"""How a replica is chosen among the usable ones of a pool: four strategies, one per class.

Each ``choose(states, exclude, now, cap)`` walks the pool's replicas once, skipping those in
``exclude`` (already tried by this call), those whose breaker refuses traffic, and, when ``cap``
is set, those with ``cap`` requests in flight (saturated). It allocates nothing, awaits nothing
and takes no lock: it runs for every request.

- ``least_outstanding`` (the default): fewest in-flight requests per unit of weight; ties rotate,
  so an idle pool still spreads its traffic.
- ``round_robin``: the next usable replica after the last one chosen; weights are ignored.
- ``weighted``: smooth weighted round robin (nginx's): weights 5, 1, 1 give a a b a c a a, never
  five a's in a row.
- ``load_aware``: like ``least_outstanding``, plus what the replica's ``/metrics`` said at the
  last scrape: the requests it runs (every gateway's: the larger of that and our own in-flight
  count), those waiting in its queue and its KV-cache use. The gateway's own in-flight count is
  live; the scraped part sees other gateways' traffic too, and is ignored once stale.

Ties never go to the same replica in every gateway process: the rotation starts at a random place,
so a fleet of gateways that each see an idle pool does not send its first requests to one replica.
"""

from __future__ import annotations

import random
from collections.abc import Container
from typing import Protocol

from gateway.replicas.config import BalancerConfig, Strategy
from gateway.replicas.state import ReplicaState

__all__ = [
    "LeastOutstanding",
    "LoadAware",
    "ReplicaStrategy",
    "RoundRobin",
    "SmoothWeighted",
    "build_strategy",
    "is_usable",
]


def is_usable(state: ReplicaState, exclude: Container[ReplicaState], now: float, cap: int | None) -> bool:
    """Not tried yet by this call, not saturated, and its breaker lets a request through."""
    if exclude and state in exclude:
        return False
    if cap is not None and state.outstanding >= cap:
        return False
    return state.breaker.allows(now)


class ReplicaStrategy(Protocol):
    """Chooses one replica of a pool, or None when none is usable."""

    name: Strategy

    def choose(
        self, states: tuple[ReplicaState, ...], exclude: Container[ReplicaState], now: float, cap: int | None
    ) -> ReplicaState | None: ...

    def load(self, state: ReplicaState, now: float) -> float:
        """The replica's load as this strategy sees it (for affinity overrides)."""
        ...


class LeastOutstanding:
    """Fewest outstanding requests per unit of weight; ties go round the pool."""

    name: Strategy = "least_outstanding"

    def __init__(self) -> None:
        self._start = random.randrange(1 << 16)  # per process: gateways do not break ties alike

    def load(self, state: ReplicaState, now: float) -> float:
        return float(state.outstanding)

    def choose(
        self, states: tuple[ReplicaState, ...], exclude: Container[ReplicaState], now: float, cap: int | None
    ) -> ReplicaState | None:
        n = len(states)
        if not n:
            return None
        i = self._start = (self._start + 1) % n
        best: ReplicaState | None = None
        best_score = 0.0
        for _ in range(n):
            state = states[i]
            i = i + 1 if i + 1 < n else 0
            if not is_usable(state, exclude, now, cap):
                continue
            score = (self.load(state, now) + 1.0) / state.replica.weight
            if best is None or score < best_score:
                best, best_score = state, score
        return best


class LoadAware(LeastOutstanding):
    """Least outstanding, plus the replica's scraped running and waiting requests and KV-cache use
    while fresh. The running count covers every gateway's requests as of the scrape; ours are in the
    live count, so only the others' are added (``ReplicaState.others_running``)."""

    name: Strategy = "load_aware"

    def __init__(self, waiting_weight: float = 1.0, kv_cache_weight: float = 4.0) -> None:
        super().__init__()
        self.waiting_weight = waiting_weight
        self.kv_cache_weight = kv_cache_weight

    def load(self, state: ReplicaState, now: float) -> float:
        load = float(state.outstanding)
        if now <= state.load_fresh_until:
            load += state.others_running()
            load += self.waiting_weight * state.num_waiting + self.kv_cache_weight * state.kv_cache_usage
        return load


class RoundRobin:
    """Each usable replica in turn."""

    name: Strategy = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def load(self, state: ReplicaState, now: float) -> float:
        return float(state.outstanding)

    def choose(
        self, states: tuple[ReplicaState, ...], exclude: Container[ReplicaState], now: float, cap: int | None
    ) -> ReplicaState | None:
        n = len(states)
        i = self._next % n if n else 0
        for _ in range(n):
            state = states[i]
            i = i + 1 if i + 1 < n else 0
            if is_usable(state, exclude, now, cap):
                self._next = i
                return state
        return None


class SmoothWeighted:
    """nginx's smooth weighted round robin over the usable replicas (``state.current_weight``)."""

    name: Strategy = "weighted"

    def load(self, state: ReplicaState, now: float) -> float:
        return float(state.outstanding)

    def choose(
        self, states: tuple[ReplicaState, ...], exclude: Container[ReplicaState], now: float, cap: int | None
    ) -> ReplicaState | None:
        best: ReplicaState | None = None
        total = 0.0
        for state in states:
            if not is_usable(state, exclude, now, cap):
                continue
            weight = state.replica.weight
            state.current_weight += weight
            total += weight
            if best is None or state.current_weight > best.current_weight:
                best = state
        if best is not None:
            best.current_weight -= total
        return best


def build_strategy(name: Strategy, config: BalancerConfig | None = None) -> ReplicaStrategy:
    """A fresh strategy object (each pool has its own, so cursors are per pool)."""
    if name == "round_robin":
        return RoundRobin()
    if name == "weighted":
        return SmoothWeighted()
    if name == "load_aware":
        config = config or BalancerConfig()
        return LoadAware(config.waiting_weight, config.kv_cache_weight)
    return LeastOutstanding()
