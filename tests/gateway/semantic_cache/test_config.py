"""gateway/cache/config.py, SemanticCacheConfig: its numbers must be finite and sane, named when not."""

from __future__ import annotations

import re

import pytest

from gateway.policy import parse_policy
from gateway.policy.schema import PolicyError
from tests.gateway.semantic_cache.fake_upstream import semantic_policy


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ttl_s", float("inf")),
        ("ttl_s", float("nan")),
        ("ttl_s", 1.0e15),
        ("ttl_s", 0.0),
        ("timeout_s", float("inf")),
        ("timeout_s", float("nan")),
        ("threshold", float("nan")),
        ("thresholds", {"small": float("nan")}),
    ],
)
def test_a_value_that_is_not_finite_or_not_sane_is_a_policy_error_naming_it(
    field: str, value: object
) -> None:
    with pytest.raises(PolicyError, match=re.escape(f"cache.semantic.{field}")):
        parse_policy(semantic_policy(**{field: value}), "test")


def test_a_year_is_the_longest_ttl() -> None:
    policy = parse_policy(semantic_policy(ttl_s=365 * 86400), "test")
    assert policy.cache.semantic.ttl_s == 365 * 86400
    with pytest.raises(PolicyError, match=re.escape("cache.semantic.ttl_s")):
        parse_policy(semantic_policy(ttl_s=365 * 86400 + 1), "test")
