"""KeyLayouts: the KEYS of an admit and of a settle, numbered as the scripts read them, built once."""

from __future__ import annotations

import pytest

from gateway.stores import LimitRule, key_layouts
from gateway.stores.key_layouts import KeyLayouts
from gateway.stores.key_names import KeySpace

ALL_KINDS = LimitRule(scope="key:k1", requests_per_minute=10, tokens_per_minute=1000, max_concurrent=3)
POOL = LimitRule(scope="pool:gpu", tokens_per_minute=500, max_concurrent=2)


def test_an_admit_declares_the_ledger_then_each_limited_key() -> None:
    key_names, checks = KeyLayouts(KeySpace()).admit("acme", "2026-11", (ALL_KINDS, POOL))
    assert key_names == [
        "sy:{t:acme}:usage:2026-11",
        "sy:{t:acme}:rpm:key:k1",
        "sy:{t:acme}:tpm:key:k1",
        "sy:{t:acme}:conc:key:k1",
        "sy:{t:acme}:tpm:pool:gpu",
        "sy:{t:acme}:conc:pool:gpu",
    ]
    # (kind, rule number, KEYS number, limit): a rule without requests_per_minute declares no rpm key
    assert checks == [(1, 1, 2, 10), (2, 1, 3, 1000), (3, 1, 4, 3), (2, 2, 5, 500), (3, 2, 6, 2)]


def test_a_settle_numbers_its_keys_after_the_settled_set() -> None:
    key_names, token_keys, lease_keys = KeyLayouts(KeySpace()).settle("acme", "2026-11", (ALL_KINDS, POOL))
    assert key_names == [
        "sy:{t:acme}:usage:2026-11",
        "sy:{t:acme}:tpm:key:k1",
        "sy:{t:acme}:conc:key:k1",
        "sy:{t:acme}:tpm:pool:gpu",
        "sy:{t:acme}:conc:pool:gpu",
    ]
    assert (token_keys, lease_keys) == ([3, 5], [4, 6])  # KEYS[1] is the settled set


def test_lease_keys_are_the_lease_sets_of_an_admit() -> None:
    layouts = KeyLayouts(KeySpace(prefix="x:"))
    assert layouts.lease_keys("acme", "2026-11", (ALL_KINDS, POOL)) == [
        "x:{t:acme}:conc:key:k1",
        "x:{t:acme}:conc:pool:gpu",
    ]
    assert layouts.lease_keys("acme", "2026-11", (LimitRule(scope="tenant", requests_per_minute=5),)) == []


def test_layouts_are_built_once_and_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_layouts, "MAX_LAYOUTS", 3)
    layouts = KeyLayouts(KeySpace())
    first = layouts.admit("acme", "2026-11", (ALL_KINDS,))
    assert layouts.admit("acme", "2026-11", (ALL_KINDS,)) is first
    assert layouts.settle("acme", "2026-11", (ALL_KINDS,)) is layouts.settle("acme", "2026-11", (ALL_KINDS,))
    for tenant in ("t1", "t2", "t3"):  # past the bound: the cache starts afresh
        layouts.admit(tenant, "2026-11", (ALL_KINDS,))
    again = layouts.admit("acme", "2026-11", (ALL_KINDS,))
    assert again is not first and again == first
