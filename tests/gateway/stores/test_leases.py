"""Concurrency leases in Redis: written for ``lease_expiry_s``, renewed while their request runs, up to
its own bound; those of a replica that stops renewing (it died) expire on their own.

The shared-store tests run over RedisStore and CreditStore (each renews its own leases) on a fake
clock: renewals happen when the test calls ``flush()`` (the stores' tickers call it in production).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.stores import CreditStore, LimitRule, RedisStore, Store
from gateway.stores.leases import LeaseBook
from tests.gateway.stores.conftest import T0, admission, settlement

KEY = "sy:{t:acme}:conc:pool:gpu"


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ---- LeaseBook ------------------------------------------------------------------------------------


def test_leases_are_written_for_the_expiry_or_the_request_bound_if_sooner() -> None:
    book = LeaseBook(30.0)
    assert (book.ttl_s(660.0), book.ttl_s(12.0), book.renew_every_s) == (30.0, 12.0, 10.0)
    with pytest.raises(ValueError):
        LeaseBook(0.0)


def test_renewals_come_every_third_of_the_expiry_and_stop_at_the_bound() -> None:
    book = LeaseBook(30.0)
    book.hold("r1", "acme", [(KEY, "r1", False)], expiry_s=T0 + 30, until_s=T0 + 45)
    book.hold("r2", "acme", [(KEY, "r2", True), (KEY, "r2#1", True)], expiry_s=T0 + 30, until_s=T0 + 600)
    assert book.renewals(T0 + 1) == {"acme": {KEY: {"r1": T0 + 31, "r2": T0 + 31, "r2#1": T0 + 31}}}
    assert book.renewals(T0 + 5) == {}  # a third of 30 s has not passed
    assert book.renewals(T0 + 11) == {"acme": {KEY: {"r1": T0 + 41, "r2": T0 + 41, "r2#1": T0 + 41}}}
    # r1 reaches its request's bound (T0 + 45) and is renewed no further
    assert book.renewals(T0 + 21) == {"acme": {KEY: {"r1": T0 + 45, "r2": T0 + 51, "r2#1": T0 + 51}}}
    assert book.renewals(T0 + 31) == {"acme": {KEY: {"r2": T0 + 61, "r2#1": T0 + 61}}}
    held = book.release("r2")
    assert held is not None and held.expiry_s == T0 + 61 and len(book) == 1
    assert book.release("r2") is None
    assert book.renewals(T0 + 41) == {}


def test_after_a_failure_no_held_lease_becomes_a_spare_slot() -> None:
    book = LeaseBook(30.0)
    book.hold("r1", "acme", [(KEY, "r1", True)], expiry_s=T0 + 30, until_s=T0 + 600)
    book.unpool()
    held = book.release("r1")
    assert held is not None and held.leases == [(KEY, "r1", False)]


# ---- leases in Redis ------------------------------------------------------------------------------


@pytest.fixture(params=["redis", "credit"])
async def replicas(
    request: pytest.FixtureRequest, redis_flushed: str
) -> AsyncIterator[Callable[[Clock], Store]]:
    """Gateway replicas sharing the session's Redis, each on its own clock: RedisStore or CreditStore."""
    made: list[Store] = []

    def make(clock: Clock) -> Store:
        shared = RedisStore(redis_flushed, timeout_s=2.0, clock=clock)
        store = (
            CreditStore(shared, clock=clock, flush_interval_s=3600) if request.param == "credit" else shared
        )
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


@pytest.fixture
async def raw(redis_flushed: str) -> AsyncIterator[Any]:
    client = aioredis.Redis.from_url(redis_flushed, decode_responses=True)
    yield client
    await client.aclose()


async def test_leases_of_a_replica_that_stops_renewing_expire_after_lease_expiry_s(
    replicas: Callable[[Clock], Store],
) -> None:
    rule = LimitRule(scope="pool:gpu", max_concurrent=2)
    live_clock, dead_clock, other_clock = Clock(), Clock(), Clock()
    live, dead, other = replicas(live_clock), replicas(dead_clock), replicas(other_clock)
    long_request = admission(rule, now_s=T0, lease_ttl_s=100)  # a stream allowed 100 s
    assert (await live.admit(long_request)).allowed
    assert (await dead.admit(admission(rule, now_s=T0, lease_ttl_s=100))).allowed
    for step in range(1, 4):  # the live replica renews every 10 s; the dead one never does
        live_clock.now = T0 + 10 * step
        await live.flush()
    other_clock.now = T0 + 29
    assert not (await other.admit(admission(rule, now_s=T0 + 29))).allowed
    other_clock.now = T0 + 31
    # the dead replica's lease expired at T0 + 30; the live one's was renewed to T0 + 60
    assert (await other.admit(admission(rule, now_s=T0 + 31, lease_ttl_s=100))).allowed
    assert not (await other.admit(admission(rule, now_s=T0 + 31.5))).allowed
    # renewals stop at the request's own bound (T0 + 100) however long it runs
    for step in range(4, 11):
        live_clock.now = T0 + 10 * step
        await live.flush()
        other_clock.now = live_clock.now
        await other.flush()  # the other replica's request still runs too
    decision = await other.admit(admission(rule, now_s=T0 + 100.5))
    assert decision.allowed  # the live request's lease ended at its bound
    await live.settle(settlement(long_request, now_s=T0 + 101))  # late: a no-op for its lease


async def test_renewal_extends_a_lease_but_never_takes_one_back(
    replicas: Callable[[Clock], Store], raw: Any
) -> None:
    clock = Clock()
    store = replicas(clock)
    rule = LimitRule(scope="pool:gpu", max_concurrent=2)
    adm = admission(rule, now_s=T0, lease_ttl_s=600)
    assert (await store.admit(adm)).allowed
    assert await raw.zscore(KEY, adm.request_id) == pytest.approx(
        T0 + 30, abs=1e-3
    )  # not the request's 600 s
    clock.now = T0 + 10
    await store.flush()
    assert await raw.zscore(KEY, adm.request_id) == pytest.approx(T0 + 40, abs=1e-3)
    assert await raw.ttl(KEY) > 0
    await raw.flushdb()  # Redis restarted empty
    clock.now = T0 + 20
    await store.flush()
    assert await raw.exists(KEY) == 0
    await store.settle(settlement(adm, now_s=T0 + 21))
    clock.now = T0 + 30
    await store.flush()
    assert await raw.exists(KEY) == 0
