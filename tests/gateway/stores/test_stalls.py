"""A stalled Redis (SIGSTOP) runs the calls that timed out on the replica once it resumes: none of
them may leave a lease behind or count twice, and no settle made during the stall is lost.

Every call into a frozen Redis times out (it cannot answer), so these tests wait on nothing but the
store's own timeout.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.stores import (
    CreditStore,
    FailMode,
    FailoverStore,
    LimitRule,
    MemoryStore,
    RedisStore,
    Store,
    StoreUnavailable,
)
from tests.gateway.stores.conftest import MONTH, T0, admission, settlement
from tools.servers.redis_server import RedisServer

TIMEOUT_S = 0.5
"""Generous: only a frozen Redis may time out here."""


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Stall:
    """SIGSTOP / SIGCONT on a Redis this test owns (always resumed at the end)."""

    def __init__(self, server: RedisServer) -> None:
        assert server.proc is not None
        self.proc = server.proc

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def stall(own_redis: RedisServer) -> Iterator[Stall]:
    stall = Stall(own_redis)
    yield stall
    stall.resume()


@pytest.fixture
async def raw(own_redis: RedisServer) -> AsyncIterator[Any]:
    client = aioredis.Redis.from_url(own_redis.url, decode_responses=True)
    yield client
    await client.aclose()


def _shared(url: str, clock: Clock, kind: str) -> RedisStore | CreditStore:
    redis = RedisStore(url, timeout_s=TIMEOUT_S, clock=clock)
    return CreditStore(redis, clock=clock, flush_interval_s=3600) if kind == "credit" else redis


async def _load_scripts(store: Store) -> None:
    """An admit, a settle and a flush, so no script is missing when Redis resumes (a NOSCRIPT reply
    would mean the late call never ran)."""
    warm = admission(LimitRule(scope="key:warm", requests_per_minute=100_000), now_s=T0, tenant="warm")
    assert (await store.admit(warm)).allowed
    await store.settle(settlement(warm, now_s=T0))
    await store.flush()


@pytest.mark.parametrize("kind", ["redis", "credit"])
async def test_an_admit_that_timed_out_leaves_no_lease_when_redis_resumes(
    own_redis: RedisServer, stall: Stall, raw: Any, kind: str
) -> None:
    clock = Clock()
    store = _shared(own_redis.url, clock, kind)
    try:
        await _load_scripts(store)
        rule = LimitRule(scope="pool:gpu", max_concurrent=1000)  # CreditStore asks for 8 spare slots too
        stall.freeze()
        with pytest.raises(StoreUnavailable):
            await store.admit(admission(rule, now_s=T0))
        stall.resume()
        await store.flush()  # written after the admit, which Redis ran when it resumed
        assert await raw.zrange("sy:{t:acme}:conc:pool:gpu", 0, -1) == []
    finally:
        await store.close()


async def test_a_flush_that_timed_out_counts_once_when_redis_resumes(
    own_redis: RedisServer, stall: Stall, raw: Any
) -> None:
    clock = Clock()
    store = CreditStore(
        RedisStore(own_redis.url, timeout_s=TIMEOUT_S, clock=clock), clock=clock, flush_interval_s=3600
    )
    try:
        await _load_scripts(store)
        rule = LimitRule(scope="key:k1", tokens_per_minute=100_000)
        adm = admission(rule, now_s=T0, reserve_tokens=500)
        assert (await store.admit(adm)).allowed
        await store.settle(settlement(adm, input_tokens=7, output_tokens=3, now_s=T0 + 0.1))
        stall.freeze()
        for _ in range(2):  # each attempt reaches Redis's socket and runs when it resumes
            with pytest.raises(StoreUnavailable):
                await store.flush()
        stall.resume()
        clock.now = T0 + 2  # the credit's second is over: handed back too
        await store.flush()
        usage = (await store.redis.usage(MONTH)).tenants["acme"].keys["k1"]
        assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 7, 3)
        assert int(await raw.hget("sy:{t:acme}:tpm:key:k1", "t")) == 10  # the real usage, once
    finally:
        await store.close()


@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
@pytest.mark.parametrize("kind", ["redis", "credit"])
async def test_settles_made_during_a_stall_are_kept_and_count_once(
    own_redis: RedisServer, stall: Stall, raw: Any, kind: str, mode: FailMode
) -> None:
    clock = Clock()
    primary = _shared(own_redis.url, clock, kind)
    fallback = MemoryStore()
    store = FailoverStore(primary, fallback, mode=mode, retry_interval_s=1.0, clock=clock)
    try:
        await _load_scripts(store)
        rule = LimitRule(scope="key:k1", tokens_per_minute=10_000, max_concurrent=2)
        first = admission(rule, now_s=T0, reserve_tokens=100)
        second = admission(rule, now_s=T0, reserve_tokens=100)
        assert (await store.admit(first)).allowed and (await store.admit(second)).allowed
        stall.freeze()
        # RedisStore: times out (it runs when Redis resumes) and opens the circuit; CreditStore: local
        await store.settle(settlement(first, input_tokens=10, output_tokens=5, now_s=T0 + 0.1))
        with pytest.raises(StoreUnavailable):
            await store.flush()  # circuit open, or CreditStore's write timed out (and opens it)
        await store.settle(settlement(second, input_tokens=10, output_tokens=5, now_s=T0 + 0.2))  # kept
        stall.resume()
        clock.now = T0 + 2  # past the circuit's retry interval, and the credit's second
        await store.flush()  # the probe: kept settles first, then what the primary holds back
        assert not store.is_degraded
        assert await raw.zrange("sy:{t:acme}:conc:key:k1", 0, -1) == []
        assert (await fallback.usage(MONTH)).tenants == {}  # both were the primary's to settle
        usage = (await primary.usage(MONTH)).tenants["acme"].keys["k1"]
        assert (usage.requests, usage.input_tokens, usage.output_tokens) == (2, 20, 10)
        assert int(await raw.hget("sy:{t:acme}:tpm:key:k1", "t")) == 30  # reservations settled once each
        for _ in range(2):
            assert (await store.admit(admission(rule, now_s=T0 + 2))).allowed
    finally:
        await store.close()
