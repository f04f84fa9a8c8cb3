"""Regions: serve a request from the nearest healthy region of its pool, and spill over when that region
cannot take it.

Replicas carry a ``region`` (``pools.<pool>.replicas[].region``); the policy's ``routing.regions``
says where this gateway is (``local``, or ``SORTYARD_REGION``), which header names the client's region
when a trusted proxy sets it (``client_header``), and how far regions are from each other
(``latency_ms``, a round trip in milliseconds). A request's **origin** is the client's region when the
header came through a trusted proxy and names a region the policy knows (a replica's, the table's or
the gateway's own), else the gateway's own.

For each pick, the pool's regions are ranked by distance from the origin: 0 from itself, else the
table's figure (either direction), else, from the gateway's own region, the measured round trip (the
median of the replicas' health probes, ``measure_rtt``), else ``unknown_latency_ms``. The latency
budget is checked against the measured round trip where there is one (from the gateway's own region:
its own region's too), else the same distance: a home region whose links slow down spills. The
first region in that order that

- has a replica the breakers allow (else it is ``unhealthy``),
- is within ``max_latency_ms`` of the origin, measured or by the table (else it is ``over_budget``), and
- has a replica below ``max_outstanding_per_replica`` (else it is ``saturated``),

serves; the reason the nearest region was passed over is the spill reason. When no region qualifies,
the nearest usable one serves (a saturated or distant replica beats none). Replicas without a region
form a region of their own named ``""``, as far as ``unknown_latency_ms`` (0 from an origin that is
also unknown). A pool whose replicas name no region skips all of this: ``Balancer.pick`` costs what it
did.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gateway.replicas.config import REGION_NAME, RegionsConfig
from gateway.replicas.state import ReplicaState
from gateway.replicas.strategies import is_usable

__all__ = [
    "REGION_NAME",
    "RegionPick",
    "RegionTable",
    "RegionsConfig",
    "group_by_region",
    "observe_rtt",
    "rank_regions",
]


@dataclass(frozen=True, slots=True)
class RegionPick:
    """How a pick went in a pool with regions: the origin, the region that served, and why the
    nearest region did not (None when it did)."""

    origin: str
    region: str
    spilled_from: str | None = None
    reason: str | None = None
    """``unhealthy`` | ``saturated`` | ``over_budget`` when it spilled."""


class RegionTable:
    """The distances of one policy's ``routing.regions`` (both directions filled in)."""

    def __init__(self, config: RegionsConfig, local: str | None, regions: Iterable[str | None] = ()) -> None:
        self.config = config
        self.local = local or ""
        distances: dict[tuple[str, str], float] = {}
        for source, row in config.latency_ms.items():
            for target, ms in row.items():
                distances.setdefault((target, source), ms)
                distances[source, target] = ms
        self._distances = distances
        self.known = frozenset({self.local, *(r for r in regions if r), *(n for p in distances for n in p)})
        """The regions the policy names: its replicas' (``regions``), this gateway's and the table's."""

    def origin(self, client: str | None) -> str:
        """Where ranking starts for a request whose client is in ``client`` (None: unknown): there when
        the policy knows that region, else this gateway's own. A well-formed name no replica, table or
        gateway has would rank every region as far as ``unknown_latency_ms`` (in name order), and would
        make a new metric label per name a client sends."""
        return client if client is not None and client in self.known else self.local

    def distance(self, origin: str, region: str, states: Sequence[ReplicaState]) -> float:
        """How far ``region`` (whose replicas are ``states``) is from ``origin`` for ranking, in ms: 0
        from itself, else the table's figure, else (from this gateway's region) the measured round
        trip, else ``unknown_latency_ms``."""
        if origin == region:
            return 0.0
        known = self._distances.get((origin, region))
        if known is not None:
            return known
        measured = self.measured_ms(origin, states)
        return measured if measured is not None else self.config.unknown_latency_ms

    def latency(self, origin: str, region: str, states: Sequence[ReplicaState]) -> float:
        """The latency the budget is checked against: measured where this gateway can (its own region
        as origin, ``measure_rtt``), else the ranking distance."""
        measured = self.measured_ms(origin, states)
        return measured if measured is not None else self.distance(origin, region, states)

    def measured_ms(self, origin: str, states: Sequence[ReplicaState]) -> float | None:
        """The median smoothed round trip of ``states``' health probes, from this gateway's region."""
        if origin != self.local or not self.config.measure_rtt:
            return None
        measured = [s.rtt_s for s in states if s.rtt_s is not None]
        return statistics.median(measured) * 1000.0 if measured else None


def rank_regions(
    table: RegionTable,
    groups: Mapping[str, tuple[ReplicaState, ...]],
    origin: str,
    exclude: Container[ReplicaState],
    now: float,
    cap: int | None,
) -> tuple[tuple[ReplicaState, ...], RegionPick] | None:
    """The replicas of the region that should serve a request from ``origin``, and how it went; None
    when no region has a usable replica."""
    ranked = sorted(groups.items(), key=lambda item: (table.distance(origin, item[0], item[1]), item[0]))
    budget = table.config.max_latency_ms
    nearest: str | None = None
    reason: str | None = None
    fallback: tuple[tuple[ReplicaState, ...], str] | None = None
    for region, states in ranked:
        if nearest is None:
            nearest = region
        usable = [s for s in states if is_usable(s, exclude, now, None)]
        why: str | None = None
        if not usable:
            why = "unhealthy"
        else:
            if fallback is None:
                fallback = (states, region)
            if budget is not None and table.latency(origin, region, states) > budget:
                why = "over_budget"
            elif cap is not None and not any(s.outstanding < cap for s in usable):
                why = "saturated"
        if why is None:
            return states, _pick(origin, region, nearest, reason)
        if reason is None:
            reason = why
    if fallback is None:
        return None
    states, region = fallback
    return states, _pick(origin, region, nearest, reason)


def _pick(origin: str, region: str, nearest: str | None, reason: str | None) -> RegionPick:
    if region == nearest:
        return RegionPick(origin, region)
    return RegionPick(origin, region, nearest, reason)


def group_by_region(states: Sequence[ReplicaState]) -> dict[str, tuple[ReplicaState, ...]] | None:
    """A pool's replicas by region, or None when none of them names one."""
    if not any(s.replica.region for s in states):
        return None
    groups: dict[str, list[ReplicaState]] = {}
    for state in states:
        groups.setdefault(state.replica.region or "", []).append(state)
    return {region: tuple(members) for region, members in groups.items()}


def observe_rtt(state: ReplicaState, seconds: float, weight: float = 0.3) -> None:
    """Fold one health probe's round trip into the replica's smoothed RTT."""
    if not math.isfinite(seconds) or seconds < 0:
        return
    previous = state.rtt_s
    state.rtt_s = seconds if previous is None else previous + weight * (seconds - previous)
