"""Region names and ``routing.regions`` are checked at load: a name reaches a response header and a
metric label as it is, and a table figure that can never apply is a typo to report, not to ignore."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.policy import PolicyError, parse_policy
from gateway.replicas.config import RegionsConfig

NOT_A_REGION = "is not a region name"


def document(regions: dict[str, Any] | None = None, *homes: str | None) -> dict[str, Any]:
    replicas = [
        {"base_url": f"http://r{i}.test/v1", "model": "m", "name": f"r{i}", "region": home}
        for i, home in enumerate(homes or ("eu", "us"))
    ]
    return {"pools": {"chat": {"replicas": replicas}}, "routing": {"regions": regions or {}}}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc, "p.yaml")
    return [line.removeprefix("p.yaml: ") for line in str(caught.value).splitlines()]


@pytest.mark.parametrize("region", ["欧洲", "eu\r\nx-evil: 1", "eu\n", "", "-eu", "e" * 64, "eu west"])
def test_a_replica_region_that_is_no_region_name_is_refused(region: str) -> None:
    (problem,) = problems(document(None, "eu", region))
    assert problem.startswith(f"pools.chat.replicas[1].region: {region!r} {NOT_A_REGION}")


def test_names_in_routing_regions_are_refused_with_their_path() -> None:
    found = problems(document({"local": "eu west", "latency_ms": {"e u": {"us": 1}, "eu": {"u\ns": 2}}}))
    assert [problem.partition(" (")[0] for problem in found] == [
        f"routing.regions.local: 'eu west' {NOT_A_REGION}",
        f"routing.regions.latency_ms: 'e u' {NOT_A_REGION}",
        f"routing.regions.latency_ms.eu: 'u\\ns' {NOT_A_REGION}",
    ]


@pytest.mark.parametrize("header", ["", "x client region", "x-region:", "é"])
def test_a_client_header_that_is_no_header_name_is_refused(header: str) -> None:
    (problem,) = problems(document({"client_header": header}))
    expected = "expected an HTTP header name (letters, digits, '-')"
    assert problem == f"routing.regions.client_header: {expected}, got {header!r}"


def test_a_client_header_matches_in_any_case() -> None:
    policy = parse_policy(document({"client_header": "X-Client-Region"}), "p.yaml")
    assert policy.routing.regions.client_header == "x-client-region"
    assert RegionsConfig(client_header="X-A").client_header == "x-a"


def test_a_region_is_not_given_a_distance_to_itself() -> None:
    assert problems(document({"latency_ms": {"eu": {"eu": 5, "us": 80}}})) == [
        "routing.regions.latency_ms.eu.eu: a region is 0 ms from itself; leave it out"
    ]


def test_a_pair_given_both_ways_must_agree() -> None:
    assert problems(document({"latency_ms": {"eu": {"us": 80}, "us": {"eu": 90}}})) == [
        "routing.regions.latency_ms.us.eu: 90 contradicts latency_ms.eu.us: 80 "
        "(a pair is read both ways: give it once)"
    ]
    assert parse_policy(document({"latency_ms": {"eu": {"us": 80}, "us": {"eu": 80}}}), "p.yaml")


def test_a_pair_with_no_replica_at_either_end_is_refused() -> None:
    assert problems(document({"latency_ms": {"eu": {"us": 80}, "eu-wset": {"ap": 10}}})) == [
        "routing.regions.latency_ms.eu-wset.ap: neither region has a replica, so the figure ranks none "
        "(replicas are in eu, us)"
    ]


def test_client_and_gateway_regions_without_replicas_may_be_paired_with_one_that_has() -> None:
    regions = {"local": "ap-south", "latency_ms": {"ap-south": {"eu": 150}, "sa-east": {"us": 120}}}
    policy = parse_policy(document(regions), "p.yaml")
    assert policy.routing.regions.local == "ap-south"


def test_replicas_without_a_region_and_an_empty_table_are_fine() -> None:
    assert parse_policy(document(None, None, "eu"), "p.yaml")
