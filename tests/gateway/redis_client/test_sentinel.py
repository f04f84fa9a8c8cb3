"""Sentinel: a store under steady load follows a failover (SIGKILL of the primary) to the promoted
replica, with real processes on loopback (a primary, a replica, three sentinels). Under fail_open the
local limiter serves the window; afterwards limits are exact again in the new primary."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator

import pytest

from gateway.redis_client.pool import RespPool
from gateway.stores import FailoverStore, LimitRule, MemoryStore, RedisStore, StoreUnavailable
from tests.gateway.stores.conftest import admission
from tests.support.redis_fleet import SentinelFleet, redis_cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (with --sentinel)"),
]


@pytest.fixture
def fleet() -> Iterator[SentinelFleet]:
    made = SentinelFleet()
    try:
        made.start()
        yield made
    finally:
        made.stop()


async def test_a_store_under_load_follows_a_failover_and_stays_exact(fleet: SentinelFleet) -> None:
    fallbacks: list[str] = []
    redis = RedisStore(fleet.url, timeout_s=0.5)
    store = FailoverStore(
        redis, MemoryStore(), mode="fail_open", retry_interval_s=0.1, on_fallback=fallbacks.append
    )
    load = LimitRule(scope="key:load", requests_per_minute=10_000_000)
    log: list[tuple[float, bool, bool]] = []  # (monotonic s, allowed, served by Redis)
    stop = asyncio.Event()
    wrote = asyncio.Event()

    async def admit_steadily() -> None:
        while not stop.is_set():
            num_fallbacks = len(fallbacks)
            decision = await store.admit(admission(load, now_s=time.time(), tenant="load"))
            log.append((time.monotonic(), decision.allowed, len(fallbacks) == num_fallbacks))
            wrote.set()
            await asyncio.sleep(0.002)

    task = asyncio.get_running_loop().create_task(admit_steadily())
    try:
        async with asyncio.timeout(60):  # an outer bound that only catches a hang
            while sum(via_redis for _, _, via_redis in log) < 50:
                await wrote.wait()
                wrote.clear()
            old_primary = fleet.primary_port()
            killed_at = time.monotonic()
            fleet.primary.kill()
            while not any(at > killed_at and via_redis for at, _, via_redis in log):
                await wrote.wait()
                wrote.clear()
        stop.set()
        await task
    finally:
        stop.set()
        task.cancel()
    recovered_at = next(at for at, _, via_redis in log if at > killed_at and via_redis)
    window = [entry for entry in log if killed_at < entry[0] < recovered_at]
    print(
        f"\nsentinel failover: admits served by Redis again {recovered_at - killed_at:.2f} s after SIGKILL "
        f"of the primary; {len(window)} admits in the window, {sum(not v for _, _, v in window)} by the "
        f"local fallback; {len(log)} admits in all"
    )
    assert fleet.primary_port() == fleet.replica.port != old_primary  # the replica was promoted
    assert isinstance(redis._fast, RespPool) and redis._fast.address == ("127.0.0.1", fleet.replica.port)
    assert all(allowed for _, allowed, _ in log)  # fail_open: no admit refused or raised meanwhile
    assert window and any(not via_redis for _, _, via_redis in window)  # the local limiter held the gap

    num_fallbacks = len(fallbacks)
    fresh = LimitRule(scope="key:fresh", requests_per_minute=5)
    decisions = [await store.admit(admission(fresh, now_s=time.time(), tenant="after")) for _ in range(8)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 3
    assert len(fallbacks) == num_fallbacks  # all eight decided by the new primary
    await store.close()


async def test_a_graceful_failover_moves_writes_to_the_new_primary(fleet: SentinelFleet) -> None:
    """SENTINEL FAILOVER turns the primary into a replica: writes to it (READONLY) or its dropped
    connection send the client back to the sentinels, which name the promoted one."""
    store = RedisStore(fleet.url, timeout_s=0.5)
    rule = LimitRule(scope="key:k", requests_per_minute=1_000_000)
    assert (await store.admit(admission(rule, now_s=time.time(), tenant="g"))).allowed
    old_primary = fleet.primary_port()
    assert redis_cli(fleet.sentinels[0].port, "SENTINEL", "FAILOVER", fleet.service) == "OK"
    async with asyncio.timeout(60):  # only catches a hang
        while True:
            try:
                if (await store.admit(admission(rule, now_s=time.time(), tenant="g"))).allowed and (
                    isinstance(store._fast, RespPool) and store._fast.address != ("127.0.0.1", old_primary)
                ):
                    break
            except StoreUnavailable:  # while the roles change
                pass
            await asyncio.sleep(0.02)
    fresh = LimitRule(scope="key:fresh", requests_per_minute=3)
    decisions = [await store.admit(admission(fresh, now_s=time.time(), tenant="g2")) for _ in range(5)]
    assert [d.allowed for d in decisions] == [True] * 3 + [False] * 2
    await store.close()
