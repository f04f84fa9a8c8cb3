"""KeyLayouts: the KEYS of an admit and of a settle, built once per tenant, month and rule set.

Each call declares only the keys its rules limit (``key_names.py`` names them); the scripts find
them by number. A layout is cached per (tenant, month, rules); a cache grown past ``MAX_LAYOUTS``
starts afresh.
"""

from __future__ import annotations

from typing import Any

from gateway.stores.base import LimitRule
from gateway.stores.key_names import KeySpace

MAX_LAYOUTS = 4096
"""Layouts cached per kind (tenants x months x rule sets) before the cache starts afresh."""

AdmitLayout = tuple[list[str], list[tuple[int, int, int, int]]]
SettleLayout = tuple[list[str], list[int], list[int]]


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Store ``value``; a cache grown past its bound starts afresh (tenants x months x rule sets)."""
    if len(cache) >= MAX_LAYOUTS:
        cache.clear()
    cache[key] = value


class KeyLayouts:
    """The admit and settle KEYS of each (tenant, month, rules), under one KeySpace."""

    def __init__(self, keys: KeySpace) -> None:
        self.keys = keys
        self._admit: dict[tuple[str, str, tuple[LimitRule, ...]], AdmitLayout] = {}
        self._settle: dict[tuple[str, str, tuple[LimitRule, ...]], SettleLayout] = {}

    def admit(self, tenant: str, month: str, rules: tuple[LimitRule, ...]) -> AdmitLayout:
        """KEYS of an admit (the ledger, then each limited window or lease set) and its checks:
        (kind, rule number, key number, limit)."""
        cache_key = (tenant, month, rules)
        layout = self._admit.get(cache_key)
        if layout is None:
            keys = self.keys
            key_names = [keys.usage(tenant, month)]
            checks: list[tuple[int, int, int, int]] = []
            for rule_no, rule in enumerate(rules, start=1):
                for kind, limit, key in (
                    (1, rule.requests_per_minute, keys.requests),
                    (2, rule.tokens_per_minute, keys.tokens),
                    (3, rule.max_concurrent, keys.leases),
                ):
                    if limit is not None:
                        key_names.append(key(tenant, rule.scope))
                        checks.append((kind, rule_no, len(key_names), limit))
            layout = (key_names, checks)
            _remember(self._admit, cache_key, layout)
        return layout

    def settle(self, tenant: str, month: str, rules: tuple[LimitRule, ...]) -> SettleLayout:
        """KEYS of a settle after its settled-set key (the ledger, token windows, lease sets) and the
        KEYS numbers of the token windows and of the lease sets."""
        cache_key = (tenant, month, rules)
        layout = self._settle.get(cache_key)
        if layout is None:
            keys = self.keys
            key_names = [keys.usage(tenant, month)]
            token_keys, lease_keys = [], []
            for rule in rules:
                if rule.tokens_per_minute is not None:
                    key_names.append(keys.tokens(tenant, rule.scope))
                    token_keys.append(len(key_names) + 1)  # KEYS[1] is the settled set
                if rule.max_concurrent is not None:
                    key_names.append(keys.leases(tenant, rule.scope))
                    lease_keys.append(len(key_names) + 1)
            layout = (key_names, token_keys, lease_keys)
            _remember(self._settle, cache_key, layout)
        return layout

    def lease_keys(self, tenant: str, month: str, rules: tuple[LimitRule, ...]) -> list[str]:
        """The lease sets an admit takes a lease in."""
        key_names, checks = self.admit(tenant, month, rules)
        return [key_names[key_no - 1] for kind, _, key_no, _ in checks if kind == 3]
