"""Pool fallbacks: the order in which pools are tried when one cannot serve.

``routing.pools.large.fallbacks: [medium]`` and ``routing.pools.medium.fallbacks: [small]`` give
``pool_order(policy, "large") == ("large", "medium", "small")``: a pool, then its own fallbacks in
the order written, then theirs (breadth first), each pool once. A cycle (``large -> medium ->
large``) or an unknown pool name is refused when the policy loads (:func:`fallback_problems`), so
a serving policy never has one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol


class _PoolFallbacks(Protocol):
    @property
    def fallbacks(self) -> tuple[str, ...]: ...


class RoutingConfig(Protocol):
    """What fallbacks read of ``gateway.replicas.config.RoutingConfig`` (which validates with this)."""

    @property
    def pools(self) -> Mapping[str, _PoolFallbacks]: ...


__all__ = ["RoutingConfig", "fallback_problems", "pool_order"]


def _routing_of(policy_or_config: Any) -> RoutingConfig | None:
    if hasattr(policy_or_config, "pools") and hasattr(policy_or_config, "balancer"):
        return policy_or_config
    return getattr(policy_or_config, "routing", None)


def pool_order(policy_or_config: Any, pool: str) -> tuple[str, ...]:
    """``pool`` then its fallbacks, breadth first, each once (a Policy or a RoutingConfig)."""
    routing = _routing_of(policy_or_config)
    if routing is None or not routing.pools:
        return (pool,)
    order = [pool]
    i = 0
    while i < len(order):
        overrides = routing.pools.get(order[i])
        if overrides is not None:
            order.extend(name for name in overrides.fallbacks if name not in order)
        i += 1
    return tuple(order)


def fallback_problems(routing: RoutingConfig, pool_names: Collection[str]) -> list[str]:
    """Unknown pools and cycles among the fallbacks, each with its path; empty if fine."""
    problems: list[str] = []
    for name, overrides in routing.pools.items():
        for i, target in enumerate(overrides.fallbacks):
            where = f"routing.pools.{name}.fallbacks[{i}]"
            if target not in pool_names:
                problems.append(f"{where}: unknown pool {target!r} (pools are {', '.join(pool_names)})")
            elif target == name:
                problems.append(f"{where}: a pool cannot fall back to itself")
            elif target in overrides.fallbacks[:i]:
                problems.append(f"{where}: {target!r} is listed twice")
    graph = {name: p.fallbacks for name, p in routing.pools.items()}
    problems.extend(_cycles(graph))
    return problems


def _cycles(graph: dict[str, tuple[str, ...]]) -> list[str]:
    """One problem per fallback edge that closes a cycle (self-references are reported apart)."""
    problems: list[str] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        path.append(node)
        for i, target in enumerate(graph.get(node, ())):
            if target == node:
                continue
            if target in path:
                cycle = " -> ".join([*path[path.index(target) :], target])
                problems.append(f"routing.pools.{node}.fallbacks[{i}]: cycle {cycle}")
            elif target not in done:
                visit(target, path)
        path.pop()
        done.add(node)

    for start in graph:
        if start not in done:
            visit(start, [])
    return problems
