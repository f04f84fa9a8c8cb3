"""The store contract: every test here runs over MemoryStore and RedisStore (a real Redis)."""

from __future__ import annotations

import random

import pytest

from gateway.stores import BudgetRule, LimitRule, Store, UsageTotals
from tests.gateway.stores.conftest import MONTH, T0, admission, settlement


def approx_s(value: float) -> object:
    """Redis reports times in whole milliseconds."""
    return pytest.approx(value, abs=1e-3)


async def test_requests_per_minute_admits_exactly_the_limit(store: Store) -> None:
    rule = LimitRule(scope="key:k1", requests_per_minute=5)
    decisions = [await store.admit(admission(rule, now_s=T0 + 0.1 * i)) for i in range(8)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 3
    first, denied = decisions[0], decisions[5]
    assert (first.limit_requests, first.remaining_requests) == (5, 4)
    assert first.reset_requests_s == approx_s(61.0)
    assert (denied.reason, denied.scope, denied.remaining_requests) == ("requests", "key:k1", 0)
    # the oldest request (bucket T0) leaves the window at T0 + 61
    assert denied.retry_after_s == approx_s(61.0 - 0.5)
    assert (await store.admit(admission(rule, now_s=T0 + 60.9))).allowed is False
    assert (await store.admit(admission(rule, now_s=T0 + 61.0))).allowed is True


async def test_window_slides_across_a_minute_boundary(store: Store) -> None:
    rule = LimitRule(scope="tenant", requests_per_minute=10)
    boundary = T0 + 60 - (T0 % 60)  # a whole minute: a fixed window would reset here
    admitted = 0
    for i in range(40):  # 20 s before the boundary to 20 s after it
        if (await store.admit(admission(rule, now_s=boundary - 20 + i))).allowed:
            admitted += 1
    assert admitted == 10


async def test_no_sixty_second_span_holds_more_than_the_limit(store: Store) -> None:
    rng = random.Random(7)
    limit = 7
    rule = LimitRule(scope="key:k1", requests_per_minute=limit)
    now, admitted_at = T0, []
    for _ in range(300):
        now += rng.expovariate(1.0)
        if (await store.admit(admission(rule, now_s=now))).allowed:
            admitted_at.append(now)
    assert len(admitted_at) >= 3 * limit  # the window did slide
    for i, start in enumerate(admitted_at):
        assert sum(1 for t in admitted_at[i:] if t < start + 60) <= limit


async def test_tokens_are_reserved_then_settled_to_real_usage(store: Store) -> None:
    rule = LimitRule(scope="key:k1", tokens_per_minute=1000)
    first = admission(rule, now_s=T0, reserve_tokens=600)
    decision = await store.admit(first)
    assert decision.allowed
    assert (decision.limit_tokens, decision.remaining_tokens) == (1000, 400)
    second = await store.admit(admission(rule, now_s=T0 + 1, reserve_tokens=600))
    assert (second.allowed, second.reason, second.exceeds_limit) == (False, "tokens", False)
    assert second.retry_after_s == approx_s(61.0 - 1)
    await store.settle(settlement(first, input_tokens=80, output_tokens=20, now_s=T0 + 2))
    third = await store.admit(admission(rule, now_s=T0 + 2, reserve_tokens=600))
    assert third.allowed and third.remaining_tokens == 300


async def test_settle_above_the_reservation_counts_the_real_usage(store: Store) -> None:
    rule = LimitRule(scope="key:k1", tokens_per_minute=1000)
    first = admission(rule, now_s=T0, reserve_tokens=100)
    assert (await store.admit(first)).allowed
    await store.settle(settlement(first, input_tokens=100, output_tokens=800))
    assert not (await store.admit(admission(rule, now_s=T0 + 1, reserve_tokens=101))).allowed
    assert (await store.admit(admission(rule, now_s=T0 + 1, reserve_tokens=100))).allowed


async def test_a_reservation_larger_than_the_limit_is_denied_at_once(store: Store) -> None:
    rule = LimitRule(scope="key:k1", tokens_per_minute=1000)
    decision = await store.admit(admission(rule, now_s=T0, reserve_tokens=1001))
    assert (decision.allowed, decision.reason, decision.exceeds_limit) == (False, "tokens", True)
    assert decision.retry_after_s == approx_s(60.0)
    assert decision.remaining_tokens == 1000  # nothing was taken


async def test_settle_of_a_bucket_that_left_the_window_changes_nothing(store: Store) -> None:
    rule = LimitRule(scope="key:k1", tokens_per_minute=1000)
    first = admission(rule, now_s=T0, reserve_tokens=900)
    assert (await store.admit(first)).allowed
    await store.settle(settlement(first, input_tokens=5000, now_s=T0 + 120))
    decision = await store.admit(admission(rule, now_s=T0 + 121, reserve_tokens=1000))
    assert decision.allowed
    assert (await store.usage(MONTH)).tenants["acme"].total.input_tokens == 5000  # the ledger still counts


async def test_denial_takes_nothing_from_any_rule(store: Store) -> None:
    loose = LimitRule(scope="tenant", requests_per_minute=100, tokens_per_minute=10_000)
    tight = LimitRule(scope="key:k1", requests_per_minute=1)
    assert (await store.admit(admission(loose, tight, now_s=T0, reserve_tokens=10))).allowed
    denied = await store.admit(admission(loose, tight, now_s=T0 + 1, reserve_tokens=10))
    assert (denied.allowed, denied.scope) == (False, "key:k1")
    after = await store.admit(admission(loose, now_s=T0 + 2, reserve_tokens=10))
    assert after.remaining_requests == 100 - 2  # the denied request counted nowhere
    assert after.remaining_tokens == 10_000 - 20


async def test_headers_come_from_the_tightest_rule(store: Store) -> None:
    tenant = LimitRule(scope="tenant", requests_per_minute=100, tokens_per_minute=500)
    key = LimitRule(scope="key:k1", requests_per_minute=3, tokens_per_minute=10_000)
    pool = LimitRule(scope="pool:gpu", max_concurrent=4)
    decision = await store.admit(admission(tenant, key, pool, now_s=T0 + 0.25, reserve_tokens=50))
    assert decision.allowed
    assert (decision.limit_requests, decision.remaining_requests) == (3, 2)
    assert (decision.limit_tokens, decision.remaining_tokens) == (500, 450)
    assert decision.reset_tokens_s == approx_s(60.75)
    only_concurrency = await store.admit(admission(pool, now_s=T0 + 1))
    assert only_concurrency.limit_requests is None and only_concurrency.limit_tokens is None


async def test_concurrency_leases_are_released_by_settle_or_expire(store: Store) -> None:
    rule = LimitRule(scope="pool:gpu", max_concurrent=2)
    a = admission(rule, now_s=T0, lease_ttl_s=30)
    b = admission(rule, now_s=T0 + 1, lease_ttl_s=30)
    assert (await store.admit(a)).allowed and (await store.admit(b)).allowed
    denied = await store.admit(admission(rule, now_s=T0 + 2))
    assert (denied.allowed, denied.reason, denied.scope) == (False, "concurrency", "pool:gpu")
    assert denied.retry_after_s == approx_s(1.0)
    await store.settle(settlement(a))
    assert (await store.admit(admission(rule, now_s=T0 + 3, lease_ttl_s=30))).allowed
    assert not (await store.admit(admission(rule, now_s=T0 + 4))).allowed
    # b's lease expires at T0 + 31 without a settle (its gateway died)
    assert (await store.admit(admission(rule, now_s=T0 + 31.5))).allowed


async def test_budget_denies_once_the_month_spend_reaches_it(store: Store) -> None:
    budgets = (BudgetRule(scope="key:k1", monthly_usd=1.0), BudgetRule(scope="tenant", monthly_usd=5.0))
    first = admission(now_s=T0, budgets=budgets)
    assert (await store.admit(first)).allowed
    await store.settle(settlement(first, input_tokens=10, cost_usd=0.6))
    second = admission(now_s=T0 + 1, budgets=budgets)
    assert (await store.admit(second)).allowed  # 0.6 < 1.0
    await store.settle(settlement(second, input_tokens=10, cost_usd=0.4))
    denied = await store.admit(admission(now_s=T0 + 2, budgets=budgets))
    assert (denied.allowed, denied.reason, denied.scope) == (False, "budget", "key:k1")
    assert denied.retry_after_s == approx_s(16 * 86400 - 2)  # until 2026-12-01T00:00Z
    other_key = admission(now_s=T0 + 3, budgets=(BudgetRule(scope="key:k2", monthly_usd=1.0),))
    assert (await store.admit(other_key)).allowed
    next_month = admission(now_s=T0 + 20 * 86400, budgets=budgets, month="2026-12")
    assert (await store.admit(next_month)).allowed


async def test_budget_wins_over_other_reasons_and_retry_covers_all(store: Store) -> None:
    rule = LimitRule(scope="key:k1", requests_per_minute=1)
    budget = (BudgetRule(scope="tenant", monthly_usd=0.0),)
    assert (await store.admit(admission(rule, now_s=T0))).allowed
    denied = await store.admit(admission(rule, now_s=T0 + 1, budgets=budget))
    assert (denied.reason, denied.scope) == ("budget", "tenant")


async def test_settle_twice_counts_once(store: Store) -> None:
    rule = LimitRule(scope="key:k1", tokens_per_minute=1000, max_concurrent=5)
    adm = admission(rule, now_s=T0, reserve_tokens=500)
    assert (await store.admit(adm)).allowed
    done = settlement(adm, input_tokens=100, output_tokens=50, cost_usd=0.25, now_s=T0 + 1)
    await store.settle(done)
    await store.settle(done)
    report = await store.usage(MONTH)
    assert report.tenants["acme"].total == UsageTotals(
        requests=1, input_tokens=100, output_tokens=50, cost_usd=0.25
    )
    decision = await store.admit(admission(rule, now_s=T0 + 2, reserve_tokens=0))
    assert decision.remaining_tokens == 850  # the second settle did not subtract the reservation again


async def test_usage_reports_per_tenant_key_and_pool(store: Store) -> None:
    for tenant, key_id, pool, tokens, cost in [
        ("acme", "k1", "gpu", (10, 20), 0.5),
        ("acme", "k1", "cpu", (1, 2), 0.25),
        ("acme", "k2", "gpu", (100, 0), 1.0),
        ("we{ir}d:%7D", "k9", "gpu", (7, 7), 0.125),
    ]:
        adm = admission(now_s=T0, tenant=tenant)
        assert (await store.admit(adm)).allowed
        await store.settle(
            settlement(
                adm, input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=cost, key_id=key_id, pool=pool
            )
        )
    report = await store.usage(MONTH)
    assert sorted(report.tenants) == ["acme", "we{ir}d:%7D"]
    acme = report.tenants["acme"]
    assert acme.total == UsageTotals(requests=3, input_tokens=111, output_tokens=22, cost_usd=1.75)
    assert acme.keys["k1"] == UsageTotals(requests=2, input_tokens=11, output_tokens=22, cost_usd=0.75)
    assert acme.pools["gpu"] == UsageTotals(requests=2, input_tokens=110, output_tokens=20, cost_usd=1.5)
    only = await store.usage(MONTH, tenant="we{ir}d:%7D")
    assert list(only.tenants) == ["we{ir}d:%7D"]
    assert only.tenants["we{ir}d:%7D"].keys["k9"].input_tokens == 7
    assert (await store.usage("2026-10")).tenants == {}


async def test_ping(store: Store) -> None:
    assert await store.ping() is True
