"""A msgspec error names its path with the document's own keys, where msgspec itself says ``[...]``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.policy import PolicyError, parse_policy
from gateway.policy.errors import describe
from tests.support.calls import policy_doc


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    limit: float = 0.0

    def __post_init__(self) -> None:
        if self.limit > 10:
            raise ValueError("limit: at most 10")


class Outer(msgspec.Struct, forbid_unknown_fields=True):
    groups: dict[str, dict[str, Inner]] = {}
    items: list[Inner] = []
    names: dict[str, int] = {}


def explain(document: Any) -> str:
    def convert(doc: Any) -> object:
        return msgspec.convert(doc, Outer, strict=True)

    with pytest.raises(msgspec.ValidationError) as caught:
        convert(document)
    return describe(caught.value, document, convert)


def test_each_mapping_key_on_the_path_is_named() -> None:
    document = {"groups": {"a": {"x": {}}, "b": {"y": {}, "z": {"limit": "high"}}}}
    assert explain(document) == "groups.b.z.limit: expected `float`, got `str`"


def test_list_items_keep_their_index_and_a_struct_check_names_its_field() -> None:
    assert explain({"items": [{}, {"limit": 11}]}) == "items[1].limit: at most 10"
    assert explain({"groups": {"g": {"k": {"limit": 12}}}}) == "groups.g.k.limit: at most 10"


def test_a_bad_key_is_named_by_itself() -> None:
    assert explain({"names": {"ok": 1, 2: 3}}) == "names: key 2: expected `str`, got `int`"


def test_errors_without_a_mapping_key_read_as_before() -> None:
    assert explain({"items": [{"colour": 1}]}) == "items[0]: object contains unknown field `colour`"
    assert explain({"names": []}) == "names: expected `object`, got `array`"


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"kv_routing": {"pools": {"small": {"tokenizer": "t", "replicas": {}, "load_tokens": -1}}}},
            "test: kv_routing.pools.small.load_tokens: expected `float` >= 0.0",
        ),
        (
            {"cache": {"semantic": {"enabled": True, "thresholds": {"small": 2}}}},
            "test: cache.semantic.thresholds.small: expected `float` <= 1.0",
        ),
        (
            {"routing": {"regions": {"latency_ms": {"eu": {"us": -1}}}}},
            "test: routing.regions.latency_ms.eu.us: expected `float` >= 0.0",
        ),
        (
            {"routing": {"pools": {"small": {"health_urls": {"small-0": 3}}}}},
            "test: routing.pools.small.health_urls.small-0: expected `str`, got `int`",
        ),
        ({"tenants": {"t": {"weight": 0}}}, "test: tenants.t.weight: expected `float` > 0.0"),
    ],
)
def test_a_policy_error_names_the_path(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(policy_doc(**sections), "test")
    assert str(caught.value) == message


def test_a_bad_pool_name_is_named_under_pools() -> None:
    document = policy_doc()
    document["pools"]["no spaces"] = document["pools"]["small"]
    with pytest.raises(PolicyError, match=r"^test: pools: key 'no spaces': expected `str` matching regex"):
        parse_policy(document, "test")


def test_a_pools_own_check_names_its_field() -> None:
    document = policy_doc()
    document["pools"]["small"]["passthrough_routes"] = ["/v1/models"]
    with pytest.raises(PolicyError) as caught:
        parse_policy(document, "test")
    assert (
        str(caught.value)
        == "test: pools.small.passthrough_routes: /v1/models is a route of the gateway's own"
    )


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"routing": {"regions": {"max_latency_ms": float("inf")}}},
            "routing.regions.max_latency_ms: expected a finite number, got inf",
        ),
        (
            {"cache": {"semantic": {"enabled": True, "pool": "small", "ttl_s": float("nan")}}},
            "cache.semantic.ttl_s: expected a finite number, got nan",
        ),
    ],
)
def test_no_figure_of_a_policy_is_infinite_or_nan(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(policy_doc(**sections), "test")
    assert str(caught.value) == f"test: {message}"
