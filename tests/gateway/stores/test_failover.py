"""FailoverStore: fail_open, fail_closed, the circuit breaker, and recovery without a restart."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

import pytest

from gateway.stores import (
    Admission,
    Decision,
    FailMode,
    FailoverStore,
    LimitRule,
    MemoryStore,
    RedisStore,
    Settlement,
    StoreUnavailable,
    UsageReport,
)
from tests.gateway.stores.conftest import MONTH, T0, admission, settlement
from tools.servers.redis_server import RedisServer

RULE = LimitRule(scope="key:k1", requests_per_minute=1000, tokens_per_minute=100_000, max_concurrent=10)


class FlakyStore(MemoryStore):
    """A MemoryStore that can be switched off, counting the calls that reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.is_down = False
        self.calls = 0
        self.flushed = asyncio.Event()
        """Set once a flush has reached this store while it was up."""

    async def admit(self, admission: Admission) -> Decision:
        self._touch()
        return await super().admit(admission)

    async def settle(self, settlement: Settlement) -> None:
        self._touch()
        await super().settle(settlement)

    async def usage(self, month: str, tenant: str | None = None) -> UsageReport:
        self._touch()
        return await super().usage(month, tenant)

    async def flush(self) -> None:
        self._touch()
        self.flushed.set()

    def _touch(self) -> None:
        self.calls += 1
        if self.is_down:
            raise StoreUnavailable("down")


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def make(mode: str) -> tuple[FailoverStore, FlakyStore, MemoryStore, Clock, list[str]]:
    primary, fallback, clock = FlakyStore(), MemoryStore(), Clock()
    used: list[str] = []
    fail_mode: FailMode = "fail_open" if mode == "fail_open" else "fail_closed"
    store = FailoverStore(
        primary, fallback, mode=fail_mode, retry_interval_s=1.0, on_fallback=used.append, clock=clock
    )
    return store, primary, fallback, clock, used


async def test_fail_open_uses_the_fallback_without_waiting_on_the_primary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, primary, _, clock, used = make("fail_open")
    assert (await store.admit(admission(RULE, now_s=T0))).allowed and not store.is_degraded
    primary.is_down = True
    with caplog.at_level(logging.WARNING, logger="sortyard.stores"):
        for i in range(5):
            assert (await store.admit(admission(RULE, now_s=T0 + i))).allowed
    assert primary.calls == 2  # one success, then one failure opened the circuit
    assert used == ["admit"] * 5 and store.is_degraded
    assert len([r for r in caplog.records if "unavailable" in r.message]) == 1  # logged once per outage

    clock.now_s += 1.5  # the interval passed: one probe, still down
    assert (await store.admit(admission(RULE, now_s=T0 + 6))).allowed
    assert primary.calls == 3

    primary.is_down = False
    clock.now_s += 1.5
    with caplog.at_level(logging.WARNING, logger="sortyard.stores"):
        assert (await store.admit(admission(RULE, now_s=T0 + 7))).allowed
    assert primary.calls == 4 and not store.is_degraded
    assert any("back" in r.message for r in caplog.records)


async def test_fail_closed_raises_with_a_retry_hint() -> None:
    store, primary, _, clock, used = make("fail_closed")
    primary.is_down = True
    with pytest.raises(StoreUnavailable):
        await store.admit(admission(RULE, now_s=T0))
    clock.now_s += 0.25
    with pytest.raises(StoreUnavailable) as caught:
        await store.admit(admission(RULE, now_s=T0))
    assert caught.value.retry_after_s == pytest.approx(0.75)
    assert primary.calls == 1 and used == []
    primary.is_down = False
    clock.now_s += 1.0
    assert (await store.admit(admission(RULE, now_s=T0))).allowed


async def test_a_request_is_settled_where_it_was_admitted() -> None:
    store, primary, fallback, clock, used = make("fail_open")
    rule = LimitRule(scope="key:k1", tokens_per_minute=100_000, max_concurrent=2)
    on_primary = admission(rule, now_s=T0, reserve_tokens=500)
    assert (await store.admit(on_primary)).allowed
    primary.is_down = True
    on_fallback = admission(rule, now_s=T0 + 1, reserve_tokens=500)
    assert (await store.admit(on_fallback)).allowed
    await store.settle(settlement(on_fallback, input_tokens=7, cost_usd=0.5))
    # admitted by the primary, which is down now: kept for it, not written to the fallback
    await store.settle(settlement(on_primary, input_tokens=3, cost_usd=0.25))
    local = (await fallback.usage(MONTH)).tenants["acme"].total
    assert (local.requests, local.input_tokens) == (1, 7)
    assert used == ["admit", "settle"]
    # the fallback released its own lease and settled its own reservation only
    after = await fallback.admit(admission(rule, now_s=T0 + 2, reserve_tokens=0))
    assert after.allowed and after.remaining_tokens == 100_000 - 7
    primary.is_down = False
    clock.now_s += 2.0  # past the retry interval: the next call probes the primary, which answers
    merged = (await store.usage(MONTH)).tenants["acme"].total
    assert (merged.requests, merged.input_tokens) == (2, 10)
    # the primary took the kept settle: its lease and reservation are free again
    again = await primary.admit(admission(rule, now_s=T0 + 3, reserve_tokens=0))
    assert again.allowed and again.remaining_tokens == 100_000 - 3
    await store.close()


@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
async def test_settles_the_primary_could_not_take_are_kept_until_it_answers(mode: str) -> None:
    store, primary, fallback, clock, used = make(mode)
    rule = LimitRule(scope="key:k1", max_concurrent=2)
    first, second = admission(rule, now_s=T0), admission(rule, now_s=T0)
    assert (await store.admit(first)).allowed and (await store.admit(second)).allowed
    primary.is_down = True
    await store.settle(settlement(first, input_tokens=3))  # fails: opens the circuit; kept, not raised
    await store.settle(settlement(second, input_tokens=4))  # circuit open: kept without a try
    assert primary.calls == 3 and used == []
    with pytest.raises(StoreUnavailable):
        await store.flush()  # still down (circuit open)
    primary.is_down = False
    clock.now_s += 2.0
    await store.flush()  # the probe: the kept settles first
    assert not store.is_degraded
    assert (await primary.usage(MONTH)).tenants["acme"].total.input_tokens == 7
    assert (await fallback.usage(MONTH)).tenants == {}
    for _ in range(2):  # both leases are free in the primary
        assert (await store.admit(admission(rule, now_s=T0 + 1))).allowed
    await store.flush()  # nothing kept: no repeat
    assert (await primary.usage(MONTH)).tenants["acme"].total.requests == 2
    await store.close()


async def test_kept_settles_reach_the_primary_before_the_admit_that_probes_it() -> None:
    store, primary, _, clock, _ = make("fail_closed")
    rule = LimitRule(scope="key:k1", max_concurrent=1)
    first = admission(rule, now_s=T0)
    assert (await store.admit(first)).allowed
    primary.is_down = True
    await store.settle(settlement(first))
    primary.is_down = False
    clock.now_s += 2.0
    assert (await store.admit(admission(rule, now_s=T0 + 1))).allowed  # not denied by first's lease
    await store.close()


async def test_kept_settles_are_written_without_any_request_coming() -> None:
    primary, fallback, clock = FlakyStore(), MemoryStore(), Clock()
    store = FailoverStore(primary, fallback, mode="fail_closed", retry_interval_s=0.01, clock=clock)
    adm = admission(RULE, now_s=T0)
    assert (await store.admit(adm)).allowed
    primary.is_down = True
    await store.settle(settlement(adm, input_tokens=5))
    primary.is_down = False
    clock.now_s += 1.0  # past the circuit's interval; the store retries by itself every 0.01 s
    async with asyncio.timeout(5):
        await primary.flushed.wait()  # the kept settles went first
    assert (await primary.usage(MONTH)).tenants["acme"].total.input_tokens == 5
    assert not store.is_degraded
    await store.close()


def test_mode_is_checked() -> None:
    with pytest.raises(ValueError):
        FailoverStore(MemoryStore(), MemoryStore(), mode="maybe")  # type: ignore[arg-type]


@pytest.mark.parametrize("outage", ["killed", "hung"])
async def test_fail_open_across_a_real_redis_outage(own_redis: RedisServer, outage: str) -> None:
    """Redis killed (connections refused) or hung (SIGSTOP: every call would wait the timeout)."""
    assert own_redis.proc is not None
    used: list[str] = []
    store = FailoverStore(
        RedisStore(own_redis.url, timeout_s=0.1),
        MemoryStore(),
        mode="fail_open",
        retry_interval_s=0.2,
        on_fallback=used.append,
    )
    try:
        now = T0
        assert (await store.admit(admission(RULE, now_s=now))).allowed and used == []
        if outage == "killed":
            own_redis.stop()
        else:
            own_redis.proc.send_signal(signal.SIGSTOP)
        started = time.perf_counter()
        for _ in range(20):
            now += 0.01
            adm = admission(RULE, now_s=now, reserve_tokens=10)
            assert (await store.admit(adm)).allowed
            await store.settle(settlement(adm, input_tokens=5))
        assert time.perf_counter() - started < 1.0  # not 20 (or 40) timeouts of 0.1 s: the circuit is open
        assert store.is_degraded and used.count("admit") == 20
        if outage == "killed":
            own_redis.start()
        else:
            own_redis.proc.send_signal(signal.SIGCONT)
        deadline = time.perf_counter() + 5.0
        while store.is_degraded and time.perf_counter() < deadline:
            now += 0.05
            await store.admit(admission(RULE, now_s=now))
            await asyncio.sleep(0.05)
        assert not store.is_degraded  # recovered without a restart
        count = used.count("admit")
        assert (await store.admit(admission(RULE, now_s=now + 1))).allowed
        assert used.count("admit") == count  # the primary serves again
    finally:
        if outage == "hung" and own_redis.proc is not None:
            own_redis.proc.send_signal(signal.SIGCONT)
        await store.close()


async def test_fallback_leases_count_against_the_primary_until_their_requests_end() -> None:
    store, primary, _fallback, clock, _used = make("fail_open")
    rule = LimitRule(scope="key:k1", max_concurrent=4)
    primary.is_down = True
    during = [admission(rule, now_s=T0) for _ in range(5)]
    decisions = [await store.admit(adm) for adm in during]
    assert [d.allowed for d in decisions] == [True] * 4 + [False]  # the fallback holds the bound alone
    primary.is_down = False
    clock.now_s += 2.0  # the primary answers again; the fallback's 4 requests still run
    after = await store.admit(admission(rule, now_s=T0 + 2))
    assert not after.allowed and after.reason == "concurrency"  # not 4 more beside them
    assert not store.is_degraded
    for adm in during[:2]:
        await store.settle(settlement(adm))
    granted = [(await store.admit(admission(rule, now_s=T0 + 3))).allowed for _ in range(3)]
    assert granted == [True, True, False]  # as many as ended
    for adm in during[2:4]:
        await store.settle(settlement(adm))
    assert (await store.admit(admission(rule, now_s=T0 + 4))).allowed
    await store.close()


async def test_the_concurrency_bound_holds_across_a_real_redis_freeze(own_redis: RedisServer) -> None:
    """A max_concurrent of 4 during a SIGSTOP of Redis and right after it: never more than 4 in flight."""
    assert own_redis.proc is not None
    store = FailoverStore(
        RedisStore(own_redis.url, timeout_s=0.1), MemoryStore(), mode="fail_open", retry_interval_s=0.2
    )
    rule = LimitRule(scope="key:k1", max_concurrent=4)
    running: list[Admission] = []

    async def fill(now_s: float) -> None:
        while (adm := admission(rule, now_s=now_s)) and (await store.admit(adm)).allowed:
            running.append(adm)
            assert len(running) <= 4

    try:
        own_redis.proc.send_signal(signal.SIGSTOP)
        await fill(T0)  # the fallback grants 4
        assert store.is_degraded and len(running) == 4
        own_redis.proc.send_signal(signal.SIGCONT)
        deadline = time.perf_counter() + 10.0
        now = T0
        while store.is_degraded and time.perf_counter() < deadline:  # until a probe finds Redis back
            now += 0.05
            await fill(now)
            await asyncio.sleep(0.05)
        assert not store.is_degraded and len(running) == 4  # Redis granted nothing beside them
        for adm in running[:3]:
            await store.settle(settlement(adm))
        del running[:3]
        await fill(now + 1)  # Redis grants exactly the 3 that ended
        assert len(running) == 4
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
        await store.close()


async def test_primary_leases_count_against_the_fallback_until_their_requests_end() -> None:
    """Into an outage: the requests Redis admitted still run, so the fallback does not grant the whole
    max_concurrent again beside them."""
    store, primary, _fallback, _clock, _used = make("fail_open")
    rule = LimitRule(scope="key:k1", max_concurrent=4)
    before = [admission(rule, now_s=T0) for _ in range(3)]
    assert all([(await store.admit(adm)).allowed for adm in before])
    primary.is_down = True
    granted = [(await store.admit(admission(rule, now_s=T0 + 1))).allowed for _ in range(3)]
    assert granted == [True, False, False]  # 3 running under Redis's leases + 1 here
    assert store.is_degraded
    await store.settle(settlement(before[0]))  # kept for Redis, and its slot is free here at once
    assert (await store.admit(admission(rule, now_s=T0 + 2))).allowed
    assert not (await store.admit(admission(rule, now_s=T0 + 2))).allowed
    await store.close()
