"""Which limits and budgets apply to a caller: the policy's keys, tenants and per-pool limits as rules.

A caller is a key (or none), a tenant and the pool it asked for; its rules are worked out once per
compiled policy (``gateway.compiled``) and remembered, so the limits stage does a dictionary lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.policy import ApiKey, Policy, RateLimits
from gateway.stores import BudgetRule, LimitRule

__all__ = ["CallerRules", "LimitRules"]


@dataclass(frozen=True, slots=True)
class CallerRules:
    """The limit and budget rules of one caller."""

    rules: tuple[LimitRule, ...]
    budgets: tuple[BudgetRule, ...]
    reserves_tokens: bool
    """A tokens-per-minute limit applies: tokens are reserved up front."""

    @property
    def is_empty(self) -> bool:
        return not self.rules and not self.budgets


def _rule(scope: str, limits: RateLimits | None) -> LimitRule | None:
    if limits is None or (
        limits.requests_per_minute is None
        and limits.tokens_per_minute is None
        and limits.max_concurrent is None
    ):
        return None
    return LimitRule(scope, limits.requests_per_minute, limits.tokens_per_minute, limits.max_concurrent)


class LimitRules:
    """A policy's rules by caller, each worked out on first use."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._by_caller: dict[tuple[str | None, str, str | None], tuple[ApiKey | None, CallerRules]] = {}

    def for_caller(self, key: ApiKey | None, tenant: str, pool: str | None) -> CallerRules:
        caller = (key.sha256 if key is not None else None, tenant, pool)
        found = self._by_caller.get(caller)
        # the same key object: its rules stand; a key changed at run time is a new object (new rules)
        if found is not None and found[0] is key:
            return found[1]
        if len(self._by_caller) >= 65536:  # rotated keys leave their old secrets' entries behind
            self._by_caller.clear()
        rules = self._work_out(key, tenant, pool)
        self._by_caller[caller] = (key, rules)
        return rules

    def _work_out(self, key: ApiKey | None, tenant_name: str, pool: str | None) -> CallerRules:
        rules: list[LimitRule] = []
        budgets: list[BudgetRule] = []
        if key is not None:
            if (rule := _rule(f"key:{key.key_id}", key.limits)) is not None:
                rules.append(rule)
            if key.budget is not None:
                budgets.append(BudgetRule(f"key:{key.key_id}", key.budget.monthly_usd))
        tenant = self.policy.tenants.get(tenant_name)
        if tenant is not None:
            if (rule := _rule("tenant", tenant.limits)) is not None:
                rules.append(rule)
            if pool is not None and (rule := _rule(f"pool:{pool}", tenant.pools.get(pool))):
                rules.append(rule)
            if tenant.budget is not None:
                budgets.append(BudgetRule("tenant", tenant.budget.monthly_usd))
        reserves = any(rule.tokens_per_minute is not None for rule in rules)
        return CallerRules(tuple(rules), tuple(budgets), reserves)
