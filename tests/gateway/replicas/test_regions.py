"""Regions: a pool serves from the region nearest the request's origin, and spills to the next when that
region is down, saturated or over the latency budget; a pool without regions is untouched."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.policy import parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.config import RegionsConfig
from gateway.replicas.regions import RegionPick, RegionTable, group_by_region, observe_rtt

LATENCY = {"eu": {"us": 80.0, "ap": 200.0}, "us": {"ap": 150.0}}


def balancer(
    regions: dict[str, Any] | None = None, *, cap: int | None = None, region: str | None = None
) -> Balancer:
    replicas = [
        {"base_url": f"http://{region}{i}.test/v1", "model": "m", "name": f"{region}{i}", "region": region}
        for region in ("eu", "us", "ap")
        for i in range(2)
    ]
    routing: dict[str, Any] = {"regions": {"local": "eu", "latency_ms": LATENCY, **(regions or {})}}
    if cap is not None:
        routing["pools"] = {"chat": {"max_outstanding_per_replica": cap}}
    made = Balancer(environ={}, region=region)
    made.update(parse_policy({"pools": {"chat": {"replicas": replicas}}, "routing": routing}, "t.yaml"))
    return made


def region_of(state: ReplicaState | None) -> str | None:
    return state.replica.region if state is not None else None


def test_the_nearest_region_serves_from_the_gateways_own_or_the_clients() -> None:
    made = balancer()
    assert region_of(made.pick("chat")) == "eu"
    assert made.last_region_pick == RegionPick("eu", "eu")
    assert region_of(made.pick("chat", origin="ap")) == "ap"


def test_an_origin_the_policy_does_not_know_is_the_gateways_own() -> None:
    made = balancer({"latency_ms": {**LATENCY, "sa": {"us": 90.0}}})
    assert region_of(made.pick("chat", origin="mars")) == "eu"
    assert made.last_region_pick == RegionPick("eu", "eu")  # the metric's origin is a region it knows
    assert region_of(made.pick("chat", origin="sa")) == "us"  # a client region the table names
    assert made.last_region_pick == RegionPick("sa", "us")


def test_sortyard_region_names_the_gateways_region() -> None:
    assert region_of(balancer(region="us").pick("chat")) == "us"


def test_a_region_with_no_healthy_replica_spills_to_the_next_nearest() -> None:
    made = balancer()
    for state in made.replicas("chat"):
        if state.replica.region == "eu":
            state.breaker.trip(made.clock())
    assert region_of(made.pick("chat")) == "us"
    assert made.last_region_pick == RegionPick("eu", "us", "eu", "unhealthy")


def test_a_saturated_region_spills_and_a_saturated_world_stays_near() -> None:
    made = balancer(cap=1)
    for state in made.replicas("chat"):
        if state.replica.region == "eu":
            state.acquire()
    assert region_of(made.pick("chat")) == "us"
    assert made.last_region_pick == RegionPick("eu", "us", "eu", "saturated")
    for state in made.replicas("chat"):
        if state.replica.region != "eu":
            state.acquire()
    assert region_of(made.pick("chat")) == "eu"  # every region full: the nearest takes it
    assert made.pick("chat", saturated_ok=False) is None  # a queued pool waits instead


def test_a_region_over_the_budget_serves_only_when_nothing_nearer_can() -> None:
    made = balancer({"max_latency_ms": 100})
    assert region_of(made.pick("chat", origin="ap")) == "ap"  # its own: 0 ms
    for state in made.replicas("chat"):
        if state.replica.region in ("eu", "us"):
            state.breaker.trip(made.clock())
    assert region_of(made.pick("chat")) == "ap"  # 200 ms away, but the only one up
    assert made.last_region_pick == RegionPick("eu", "ap", "eu", "unhealthy")


def test_a_home_region_measured_over_the_budget_spills() -> None:
    made = balancer({"max_latency_ms": 50})
    for state in made.replicas("chat"):
        observe_rtt(state, {"eu": 0.090, "us": 0.010, "ap": 0.300}[state.replica.region or ""])
    assert region_of(made.pick("chat")) == "us"  # eu is home, but 90 ms away as measured
    assert made.last_region_pick == RegionPick("eu", "us", "eu", "over_budget")
    assert region_of(made.pick("chat", origin="ap")) == "ap"  # another origin: the table (0 to itself)
    unmeasured = balancer({"max_latency_ms": 50, "measure_rtt": False})
    for state in unmeasured.replicas("chat"):
        observe_rtt(state, 0.5)
    assert region_of(unmeasured.pick("chat")) == "eu"


def test_regions_the_table_leaves_out_rank_by_measured_round_trip() -> None:
    made = balancer({"latency_ms": {}})
    for state in made.replicas("chat"):
        observe_rtt(state, {"eu": 0.090, "us": 0.010, "ap": 0.300}[state.replica.region or ""])
    assert region_of(made.pick("chat")) == "eu"  # home: 0
    for state in made.replicas("chat"):
        if state.replica.region == "eu":
            state.breaker.trip(made.clock())
    assert region_of(made.pick("chat")) == "us"  # then the nearest as measured


def test_affinity_is_kept_only_inside_the_chosen_region() -> None:
    made = balancer()
    assert made.pick("chat", prefer="us1").label.startswith("eu")  # type: ignore[union-attr]
    assert made.pick("chat", prefer="eu1").label == "eu1"  # type: ignore[union-attr]


def test_a_pool_without_regions_is_untouched() -> None:
    made = Balancer()
    made.update(
        parse_policy({"pools": {"p": {"replicas": [{"base_url": "http://a/v1", "model": "m"}]}}}, "t")
    )
    assert made.pick("p") is not None and made.last_region_pick is None
    assert group_by_region(made.replicas("p")) is None


def test_the_table_reads_both_ways_and_unknown_pairs_are_far() -> None:
    table = RegionTable(RegionsConfig(latency_ms=LATENCY, unknown_latency_ms=999), "eu")
    assert table.distance("us", "eu", ()) == 80.0 and table.distance("ap", "us", ()) == 150.0
    assert table.distance("eu", "eu", ()) == 0.0 and table.distance("eu", "mars", ()) == 999


def test_rtt_is_smoothed_and_nonsense_ignored() -> None:
    state = balancer().replicas("chat")[0]
    observe_rtt(state, 0.1)
    observe_rtt(state, 0.2)
    observe_rtt(state, float("nan"))
    assert state.rtt_s == pytest.approx(0.13)


def test_the_table_knows_the_replicas_regions_its_own_and_the_tables() -> None:
    table = RegionTable(RegionsConfig(latency_ms={"sa": {"us": 90.0}}), "eu", ["ap", None])
    assert table.known == {"eu", "ap", "sa", "us"}
    assert [table.origin(o) for o in ("ap", "sa", "mars", None)] == ["ap", "sa", "eu", "eu"]
    assert RegionTable(RegionsConfig(), None).origin("mars") == ""
