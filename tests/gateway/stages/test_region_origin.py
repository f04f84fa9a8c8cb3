"""The request's origin region (a trusted proxy's header, else the gateway's own) and what a pick in a
pool with regions tells the client (``x-sortyard-region``, ``x-sortyard-region-spill``) and the metrics."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gateway.stages.pick import PickReplica
from gateway.stages.region_origin import origin_of
from gateway.telemetry.regions import RegionMetrics
from tests.support.calls import USER_HI, balancer_for, build_call, compile_doc

REPLICAS = [
    {"base_url": f"http://{region}.test/v1", "model": "m", "name": region, "region": region}
    for region in ("eu", "us")
]


def document(**regions: Any) -> dict[str, Any]:
    return {
        "pools": {"chat": {"replicas": REPLICAS}},
        "auth": {"required": False},
        "limits": {"unauthenticated": {"trusted_proxies": ["10.0.0.0/8"]}},
        "routing": {"regions": {"local": "eu", "latency_ms": {"eu": {"us": 90}}, **regions}},
    }


def call_from(peer: str, region: str | None, **regions: Any) -> Any:
    headers = {"x-client-region": region} if region is not None else {}
    compiled = compile_doc(document(**regions))
    call = build_call(compiled, {"model": "chat", "messages": USER_HI}, headers=headers)
    call.peer = peer
    return call


def test_the_header_counts_only_from_a_trusted_proxy_and_only_as_a_region_name() -> None:
    assert origin_of(call_from("10.1.2.3", "us", client_header="x-client-region")) == "us"
    assert origin_of(call_from("192.0.2.7", "us", client_header="x-client-region")) is None  # a client
    assert origin_of(call_from("10.1.2.3", "us west; drop", client_header="x-client-region")) is None
    assert origin_of(call_from("10.1.2.3", None, client_header="x-client-region")) is None
    assert origin_of(call_from("10.1.2.3", "us")) is None  # the policy names no header


async def test_the_pick_says_which_region_served_and_why_it_spilled() -> None:
    registry = CollectorRegistry()
    call = call_from("10.1.2.3", "us", client_header="x-client-region")
    balancer = balancer_for(call.compiled)
    pick = PickReplica(balancer, on_region=RegionMetrics(registry).count)
    await pick(call)
    assert call.replica is not None and call.replica.label == "us"
    assert call.response_headers["x-sortyard-region"] == "us"
    assert "x-sortyard-region-spill" not in call.response_headers

    balancer.replicas("chat")[0].breaker.trip(balancer.clock())  # eu down: a call from eu spills
    spilled = call_from("192.0.2.7", "eu", client_header="x-client-region")
    await pick(spilled)
    assert spilled.response_headers["x-sortyard-region"] == "us"
    assert spilled.response_headers["x-sortyard-region-spill"] == "eu -> us: unhealthy"

    def counted(**labels: str) -> float | None:
        return registry.get_sample_value("sortyard_region_picks_total", {"pool": "chat", **labels})

    assert counted(origin="us", region="us", reason="nearest") == 1.0
    assert counted(origin="eu", region="us", reason="unhealthy") == 1.0


async def test_a_pool_without_regions_adds_no_header() -> None:
    compiled = compile_doc({"pools": {"chat": {"replicas": [REPLICAS[0] | {"region": None}]}}})
    call = build_call(compiled, {"model": "chat", "messages": USER_HI})
    await PickReplica(balancer_for(compiled))(call)
    assert "x-sortyard-region" not in call.response_headers
