"""``RegionMetrics``: how picks in pools with regions went, on the gateway's registry (``/metrics``):
``sortyard_region_picks_total{pool, origin, region, reason}``, where ``reason`` is ``nearest`` when
the nearest region served, else why it was passed over (``unhealthy``, ``saturated``,
``over_budget``). A region's share of spills shows a region that is down or too small."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from gateway.replicas.regions import RegionPick

__all__ = ["RegionMetrics"]


class RegionMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.picks = Counter(
            "sortyard_region_picks",
            "Picks in pools whose replicas name regions: the request's origin, the region that served "
            "and, when it was not the nearest, why.",
            ["pool", "origin", "region", "reason"],
            registry=registry,
        )

    def count(self, pool: str, pick: RegionPick) -> None:
        reason = pick.reason if pick.spilled_from is not None and pick.reason else "nearest"
        self.picks.labels(pool, pick.origin or "-", pick.region or "-", reason).inc()
