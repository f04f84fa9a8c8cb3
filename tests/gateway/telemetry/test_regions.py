"""The region picks counter: ``nearest`` when the nearest region served, else the spill reason."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.replicas.regions import RegionPick
from gateway.telemetry.regions import RegionMetrics


def test_picks_count_by_origin_region_and_reason() -> None:
    registry = CollectorRegistry()
    metrics = RegionMetrics(registry)
    metrics.count("chat", RegionPick("eu", "eu"))
    metrics.count("chat", RegionPick("eu", "us", "eu", "saturated"))
    metrics.count("chat", RegionPick("", "", None, None))

    def counted(origin: str, region: str, reason: str) -> float | None:
        labels = {"pool": "chat", "origin": origin, "region": region, "reason": reason}
        return registry.get_sample_value("sortyard_region_picks_total", labels)

    assert counted("eu", "eu", "nearest") == 1.0 and counted("eu", "us", "saturated") == 1.0
    assert counted("-", "-", "nearest") == 1.0
