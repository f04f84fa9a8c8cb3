"""CreditStore on a real Redis: fewer round trips, and limits as exact as RedisStore's.

The contract suite (test_contract.py) runs over CreditStore too; these tests cover what only credit
does: admitting from it, handing it back, spare lease slots, batched settles, and several replicas.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.stores import (
    Admission,
    BudgetRule,
    CreditStore,
    Decision,
    LimitRule,
    RedisStore,
    StoreUnavailable,
    UsageTotals,
)
from tests.gateway.stores.conftest import MONTH, T0, admission, settlement


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingRedisStore(RedisStore):
    """Counts the admits and flushes that reach Redis."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admits = 0
        self.flushes = 0
        self.fail_flushes = 0

    async def admit_with_credit(self, *args: Any, **kwargs: Any) -> Any:
        self.admits += 1
        return await super().admit_with_credit(*args, **kwargs)

    def flush_soon(self, *args: Any, **kwargs: Any) -> Any:
        self.flushes += 1
        if self.fail_flushes:
            self.fail_flushes -= 1
            return self._fail()
        return super().flush_soon(*args, **kwargs)

    async def _fail(self) -> None:
        raise StoreUnavailable("injected")


@pytest.fixture
async def make(redis_flushed: str) -> AsyncIterator[Callable[..., CreditStore]]:
    made: list[CreditStore] = []

    def factory(clock: Clock, **kwargs: Any) -> CreditStore:
        store = CreditStore(
            CountingRedisStore(redis_flushed, timeout_s=2.0), clock=clock, flush_interval_s=3600, **kwargs
        )
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.close()


@pytest.fixture
async def raw(redis_flushed: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_flushed, decode_responses=True)
    yield client
    await client.aclose()


def counting(store: CreditStore) -> CountingRedisStore:
    assert isinstance(store.redis, CountingRedisStore)
    return store.redis


async def window_total(raw: aioredis.Redis, kind: str, scope: str, tenant: str = "acme") -> int:
    return int(await raw.hget(f"sy:{{t:{tenant}}}:{kind}:{scope}", "t") or 0)


async def test_most_admits_are_answered_from_credit(make: Callable[..., CreditStore], raw: Any) -> None:
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000, tokens_per_minute=10_000_000)
    decisions = [
        await store.admit(admission(rule, now_s=T0 + 0.001 * i, reserve_tokens=100)) for i in range(200)
    ]
    assert all(d.allowed for d in decisions)
    assert counting(store).admits <= 4  # one per 64 requests of credit
    assert decisions[-1].remaining_requests == 100_000 - 200
    assert decisions[-1].remaining_tokens == 10_000_000 - 200 * 100
    # the second is over: what was not spent goes back, and Redis holds exactly what was admitted
    clock.now = T0 + 1.5
    await store.flush()
    assert await window_total(raw, "rpm", "key:k1") == 200
    assert await window_total(raw, "tpm", "key:k1") == 200 * 100


async def test_no_credit_on_small_limits(make: Callable[..., CreditStore]) -> None:
    store = make(Clock())
    rule = LimitRule(scope="key:k1", requests_per_minute=63)
    decisions = [await store.admit(admission(rule, now_s=T0)) for _ in range(70)]
    assert sum(d.allowed for d in decisions) == 63
    assert counting(store).admits == 70  # every one asked Redis


async def test_replicas_sharing_redis_admit_exactly_the_limit(make: Callable[..., CreditStore]) -> None:
    clock = Clock()
    replicas = [make(clock) for _ in range(3)]
    rule = LimitRule(scope="key:k1", requests_per_minute=300)
    rng = random.Random(3)
    admitted = 0
    for step in range(2000):
        clock.now = T0 + step * 0.004  # 8 s: credit of each second is handed back as it passes
        store = replicas[rng.randrange(3)]
        if step % 50 == 0:
            for replica in replicas:
                await replica.flush()
        if (await store.admit(admission(rule, now_s=clock.now))).allowed:
            admitted += 1
    assert admitted == 300
    assert sum(counting(r).admits for r in replicas) < 2000  # credit answered some of them


async def test_concurrent_replicas_never_exceed_the_limit(make: Callable[..., CreditStore]) -> None:
    clock = Clock()
    replicas = [make(clock) for _ in range(3)]
    rule = LimitRule(scope="tenant", requests_per_minute=1000, tokens_per_minute=50_000)

    async def one(i: int) -> Decision:
        return await replicas[i % 3].admit(admission(rule, now_s=T0 + 0.2, reserve_tokens=40))

    decisions = await asyncio.gather(*(one(i) for i in range(1500)))
    admitted = sum(d.allowed for d in decisions)
    assert admitted <= 1000 and admitted * 40 <= 50_000
    assert admitted >= 1000 - 3 * 1000 // 16  # only other replicas' unspent credit can deny


async def test_settled_tokens_return_to_credit_and_the_ledger_is_flushed(
    make: Callable[..., CreditStore], raw: Any
) -> None:
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="key:k1", tokens_per_minute=1_000_000)
    admissions = [admission(rule, now_s=T0 + 0.01 * i, reserve_tokens=500) for i in range(10)]
    for adm in admissions:
        assert (await store.admit(adm)).allowed
    for adm in admissions:
        await store.settle(settlement(adm, input_tokens=100, output_tokens=20, cost_usd=0.5, now_s=T0 + 0.5))
    assert counting(store).flushes == 0  # settles are local until the flush
    clock.now = T0 + 2
    report = await store.usage(MONTH)  # flushes first
    assert report.tenants["acme"].keys["k1"] == UsageTotals(
        requests=10, input_tokens=1000, output_tokens=200, cost_usd=5.0
    )
    assert await window_total(raw, "tpm", "key:k1") == 10 * 120


async def test_settle_after_its_second_adjusts_the_bucket_in_redis(
    make: Callable[..., CreditStore], raw: Any
) -> None:
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="key:k1", tokens_per_minute=1_000_000)
    adm = admission(rule, now_s=T0, reserve_tokens=500)
    assert (await store.admit(adm)).allowed
    clock.now = T0 + 3
    await store.settle(settlement(adm, input_tokens=100, output_tokens=20, now_s=T0 + 3))
    await store.flush()
    assert await window_total(raw, "tpm", "key:k1") == 120


async def test_spare_lease_slots_serve_requests_and_go_back_when_idle(
    make: Callable[..., CreditStore], raw: Any
) -> None:
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="pool:gpu", max_concurrent=1000)
    admissions = [admission(rule, now_s=T0 + 0.001 * i, lease_ttl_s=120) for i in range(40)]
    for adm in admissions:
        assert (await store.admit(adm)).allowed
    assert counting(store).admits < 40
    key = "sy:{t:acme}:conc:pool:gpu"
    held = await raw.zcard(key)
    assert 40 <= held <= 40 + 8 * counting(store).admits
    for adm in admissions:
        await store.settle(settlement(adm, now_s=T0 + 0.1))
    assert await raw.zcard(key) == held  # spare now, still held for this replica
    clock.now = T0 + 1.0
    await store.flush()
    assert await raw.zcard(key) == 0


async def test_small_concurrency_limits_release_at_once(make: Callable[..., CreditStore], raw: Any) -> None:
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="pool:gpu", max_concurrent=2)
    adm = admission(rule, now_s=T0)
    assert (await store.admit(adm)).allowed
    await store.settle(settlement(adm, now_s=T0 + 0.1))
    await store.flush()
    assert await raw.zcard("sy:{t:acme}:conc:pool:gpu") == 0


async def test_budget_room_is_spent_locally_by_settles(make: Callable[..., CreditStore]) -> None:
    store = make(Clock())
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000)
    budgets = (BudgetRule(scope="key:k1", monthly_usd=1.0),)
    first = admission(rule, now_s=T0, budgets=budgets)
    assert (await store.admit(first)).allowed
    await store.settle(settlement(first, cost_usd=1.0, now_s=T0 + 0.1))
    denied = await store.admit(admission(rule, now_s=T0 + 0.2, budgets=budgets))
    assert (denied.allowed, denied.reason) == (False, "budget")


async def test_a_failed_flush_keeps_the_usage_for_the_next(make: Callable[..., CreditStore]) -> None:
    clock = Clock()
    store = make(clock)
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000)
    adm: Admission = admission(rule, now_s=T0)
    assert (await store.admit(adm)).allowed
    await store.settle(settlement(adm, input_tokens=7, now_s=T0 + 0.1))
    counting(store).fail_flushes = 1
    with pytest.raises(StoreUnavailable):
        await store.flush()
    report = await store.usage(MONTH)
    assert report.tenants["acme"].keys["k1"].input_tokens == 7


async def test_close_hands_everything_back(redis_flushed: str, raw: Any) -> None:
    clock = Clock()
    store = CreditStore(RedisStore(redis_flushed, timeout_s=2.0), clock=clock, flush_interval_s=3600)
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000, max_concurrent=1000)
    adm = admission(rule, now_s=T0, lease_ttl_s=120)
    assert (await store.admit(adm)).allowed
    await store.settle(settlement(adm, now_s=T0 + 0.1))
    await store.close()
    assert await window_total(raw, "rpm", "key:k1") == 1
    assert await raw.zcard("sy:{t:acme}:conc:key:k1") == 0


async def test_admits_missing_credit_together_wait_for_one_request_of_it(
    make: Callable[..., CreditStore],
) -> None:
    store = make(Clock())
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000)
    decisions = await asyncio.gather(*(store.admit(admission(rule, now_s=T0 + 0.5)) for _ in range(100)))
    assert all(d.allowed for d in decisions)
    assert counting(store).admits == 1  # the others waited for its credit


async def test_one_flush_writes_every_tenant(make: Callable[..., CreditStore]) -> None:
    store = make(Clock())
    rule = LimitRule(scope="tenant", requests_per_minute=100_000)
    for tenant in ("acme", "globex", "initech"):
        adm = admission(rule, now_s=T0, tenant=tenant)
        assert (await store.admit(adm)).allowed
        await store.settle(settlement(adm, input_tokens=3, now_s=T0 + 0.1))
    await store.flush()
    report = await store.redis.usage(MONTH)  # straight from Redis: nothing left pending
    assert {name: usage.total.input_tokens for name, usage in report.tenants.items()} == {
        "acme": 3,
        "globex": 3,
        "initech": 3,
    }


async def test_credit_is_dropped_when_redis_fails(make: Callable[..., CreditStore]) -> None:
    store = make(Clock())
    rule = LimitRule(scope="key:k1", requests_per_minute=100_000)
    adm = admission(rule, now_s=T0)
    assert (await store.admit(adm)).allowed
    await store.settle(settlement(adm, now_s=T0 + 0.1))
    counting(store).fail_flushes = 1
    with pytest.raises(StoreUnavailable):
        await store.flush()
    assert (await store.admit(admission(rule, now_s=T0 + 0.2))).allowed
    assert counting(store).admits == 2  # no credit left after the failure: this one asked Redis


async def test_replicas_never_hold_more_leases_than_the_limit(
    make: Callable[..., CreditStore], raw: Any
) -> None:
    clock = Clock()
    replicas = [make(clock) for _ in range(3)]
    rule = LimitRule(scope="pool:gpu", max_concurrent=100)
    admissions = [admission(rule, now_s=T0 + 0.1, lease_ttl_s=120) for _ in range(150)]
    decisions = await asyncio.gather(*(replicas[i % 3].admit(a) for i, a in enumerate(admissions)))
    admitted = [a for a, d in zip(admissions, decisions, strict=True) if d.allowed]
    assert 100 - 3 * 100 // 16 <= len(admitted) <= 100  # only spare slots elsewhere can deny
    assert await raw.zcard("sy:{t:acme}:conc:pool:gpu") <= 100
    for i, adm in enumerate(admissions):
        if adm in admitted:
            await replicas[i % 3].settle(settlement(adm, now_s=T0 + 0.2))
    clock.now = T0 + 1.0  # spare slots unused for longer than slot_idle_s go back
    for replica in replicas:
        await replica.flush()
    assert await raw.zcard("sy:{t:acme}:conc:pool:gpu") == 0


@pytest.mark.parametrize(
    "rule",
    [LimitRule(scope="pool:gpu", max_concurrent=64), LimitRule(scope="key:k1", requests_per_minute=64)],
    ids=["leases", "requests"],
)
async def test_a_burst_of_exactly_the_limit_is_admitted_in_full(
    make: Callable[..., CreditStore], rule: LimitRule
) -> None:
    """Admits that reach Redis together: the credit one of them takes must not deny the others."""
    store = make(Clock())
    burst = [admission(rule, now_s=T0 + 0.5, lease_ttl_s=120) for _ in range(64)]
    decisions = await asyncio.gather(*(store.admit(adm) for adm in burst))
    assert [d.allowed for d in decisions] == [True] * 64
    assert not (await store.admit(admission(rule, now_s=T0 + 0.5))).allowed


async def test_a_lease_held_when_redis_failed_is_released_not_kept_as_a_spare(
    make: Callable[..., CreditStore], raw: Any
) -> None:
    store = make(Clock())
    rule = LimitRule(scope="pool:gpu", max_concurrent=1000)
    running, done = admission(rule, now_s=T0, lease_ttl_s=120), admission(rule, now_s=T0, lease_ttl_s=120)
    assert (await store.admit(running)).allowed and (await store.admit(done)).allowed
    await store.settle(settlement(done, now_s=T0 + 0.1))
    counting(store).fail_flushes = 1
    with pytest.raises(StoreUnavailable):
        await store.flush()
    # Redis failed while `running` ran: its lease may be gone there (expired, or an empty restarted
    # Redis), so it must not serve a later request as a spare slot
    await store.settle(settlement(running, now_s=T0 + 0.2))
    assert (await store.admit(admission(rule, now_s=T0 + 0.3))).allowed
    assert counting(store).admits == 2  # asked Redis: no spare slot was kept
    await store.flush()
    assert await raw.zscore("sy:{t:acme}:conc:pool:gpu", running.request_id) is None  # released


class StalledRedisStore(CountingRedisStore):
    """Admits that reach Redis wait until ``release`` is set, then fail as a timeout would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.reached = asyncio.Event()

    async def admit_with_credit(self, *args: Any, **kwargs: Any) -> Any:
        self.admits += 1
        self.reached.set()
        await self.release.wait()
        raise StoreUnavailable("timed out")


async def test_admits_waiting_on_a_failed_credit_request_fail_with_it(redis_flushed: str) -> None:
    """Those waiting on another admit's credit request do not each ask Redis again once it failed:
    that would make them wait a second store timeout, past ``store.timeout_s``."""
    stalled = StalledRedisStore(redis_flushed, timeout_s=2.0)
    store = CreditStore(stalled, clock=Clock(), flush_interval_s=3600)
    rule = LimitRule(scope="key:k1", requests_per_minute=1000)
    try:
        admits = [asyncio.ensure_future(store.admit(admission(rule, now_s=T0))) for _ in range(5)]
        await stalled.reached.wait()  # the first reached Redis
        for _ in range(5):  # let the others reach their wait on its credit request
            await asyncio.sleep(0)
        stalled.release.set()
        results = await asyncio.gather(*admits, return_exceptions=True)
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        assert stalled.admits == 1
    finally:
        await store.close()
