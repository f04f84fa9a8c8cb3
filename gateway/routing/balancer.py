"""Replica choice inside a pool: least outstanding requests, weighted, skipping unhealthy replicas.

Health here is passive: ``max_consecutive_failures`` connect errors, timeouts or 5xx in a row mark a
replica unhealthy for ``cooldown_s``; after that one request may probe it again. Active probes,
breaker states and load-aware choice come with the routing issue and plug in behind ``pick``.
State lives in ``ReplicaState`` objects that survive a policy reload (keyed by pool, URL and model).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway.policy import Policy, Replica


@dataclass(slots=True, eq=False)
class ReplicaState:
    """A replica plus what the gateway has learned about it."""

    pool: str
    replica: Replica
    api_key: str | None = None
    outstanding: int = 0
    consecutive_failures: int = 0
    unhealthy_until: float = 0.0
    num_requests: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.replica.label

    def is_healthy(self, now: float) -> bool:
        return now >= self.unhealthy_until

    def acquire(self) -> None:
        self.outstanding += 1
        self.num_requests += 1

    def release(self) -> None:
        self.outstanding -= 1


class Balancer:
    """Picks a replica of a pool; holds the per-replica state across policy reloads."""

    def __init__(
        self,
        *,
        max_consecutive_failures: int = 3,
        cooldown_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.max_consecutive_failures = max_consecutive_failures
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.environ = environ if environ is not None else os.environ
        self.pools: dict[str, tuple[ReplicaState, ...]] = {}
        self._states: dict[tuple[str, str, str], ReplicaState] = {}

    def update(self, policy: Policy) -> None:
        """Adopt a new policy's pools, keeping the state of replicas that remain."""
        states: dict[tuple[str, str, str], ReplicaState] = {}
        pools: dict[str, tuple[ReplicaState, ...]] = {}
        for pool_name, pool in policy.pools.items():
            members = []
            for replica in pool.replicas:
                key = (pool_name, replica.base_url, replica.model)
                state = self._states.get(key) or ReplicaState(pool_name, replica)
                state.replica = replica
                state.api_key = self.environ.get(replica.api_key_env) if replica.api_key_env else None
                state.headers = {"Authorization": f"Bearer {state.api_key}"} if state.api_key else {}
                states[key] = state
                members.append(state)
            pools[pool_name] = tuple(members)
        self._states, self.pools = states, pools

    def replicas(self, pool: str) -> tuple[ReplicaState, ...]:
        return self.pools.get(pool, ())

    def all_replicas(self) -> Iterable[ReplicaState]:
        return self._states.values()

    def pick(self, pool: str, exclude: tuple[ReplicaState, ...] = ()) -> ReplicaState | None:
        """The healthy replica with the fewest outstanding requests per unit of weight."""
        now = self.clock()
        best: ReplicaState | None = None
        best_score = 0.0
        for state in self.pools.get(pool, ()):
            if state in exclude or not state.is_healthy(now):
                continue
            score = (state.outstanding + 1) / state.replica.weight
            if best is None or score < best_score:
                best, best_score = state, score
        return best

    def has_healthy(self) -> bool:
        now = self.clock()
        return any(state.is_healthy(now) for state in self._states.values())

    def record_success(self, state: ReplicaState) -> None:
        state.consecutive_failures = 0

    def record_failure(self, state: ReplicaState) -> None:
        state.consecutive_failures += 1
        if state.consecutive_failures >= self.max_consecutive_failures:
            state.unhealthy_until = self.clock() + self.cooldown_s
