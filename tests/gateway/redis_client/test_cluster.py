"""Redis Cluster with real processes on loopback (three primaries): the store and a cache route by
hash slot, usage reads every primary, redirects are followed, and a tenant's slot migrating under
load (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) loses and duplicates no count."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterator

import pytest

from gateway.cache.blobs import RedisBlobs
from gateway.redis_client.cluster import ClusterClient
from gateway.redis_client.commands import RespCommands
from gateway.redis_client.slots import CrossSlotError, key_slot
from gateway.stores import LimitRule, RedisStore, StoreUnavailable
from gateway.stores.key_names import KeySpace
from tests.gateway.stores.conftest import MONTH, admission, settlement
from tests.support.redis_fleet import Cluster, redis_cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-server and redis-cli"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    made = Cluster()
    try:
        made.start()
        yield made
    finally:
        made.stop()


async def test_the_store_routes_by_slot_and_usage_reads_every_primary(cluster: Cluster) -> None:
    store = RedisStore(cluster.url, timeout_s=2.0)
    tenants = [f"tenant-{i}" for i in range(12)]
    owners = {cluster.owner_port(key_slot(KeySpace().usage(t, MONTH))) for t in tenants}
    assert len(owners) == 3  # the tenants' keys live on all three primaries
    rule = LimitRule(scope="key:k1", requests_per_minute=2, tokens_per_minute=1000, max_concurrent=5)
    now = time.time()
    for tenant in tenants:
        first, second, third = (
            admission(rule, now_s=now, tenant=tenant, reserve_tokens=10) for _ in range(3)
        )
        assert [(await store.admit(a)).allowed for a in (first, second, third)] == [True, True, False]
        await store.settle(settlement(first, input_tokens=3, output_tokens=4, cost_usd=0.5))
    report = await store.usage(MONTH)
    assert sorted(report.tenants) == sorted(tenants)
    assert all(t.total.requests == 1 and t.total.output_tokens == 4 for t in report.tenants.values())
    assert (await store.usage(MONTH, "tenant-3")).tenants["tenant-3"].total.cost_usd == 0.5
    await store.close()


async def test_a_cache_works_and_cross_slot_commands_are_refused_before_sending(cluster: Cluster) -> None:
    blobs = RedisBlobs(cluster.url, timeout_s=2.0)
    assert await blobs.set_many([("c:{a}:1", b"x"), ("c:{a}:2", b"y")], ttl_s=60)
    assert await blobs.get_many(["c:{a}:1", "c:{a}:2"]) == [b"x", b"y"]
    assert await blobs.get("c:{b}:1") is None
    await blobs.close()
    client = RespCommands.from_url(cluster.url)
    with pytest.raises(CrossSlotError):
        await client.delete("c:{a}:1", "c:{b}:1")
    with pytest.raises(CrossSlotError):
        await client.evalsha("0" * 40, "return 1", ["sy:{t:a}:rpm:x", "sy:{t:b}:rpm:x"])
    await client.close()


def _migrate(cluster: Cluster, slot: int, source: int, target: int, *, between: Callable[[], None]) -> None:
    """Move ``slot`` from port ``source`` to ``target`` as redis-cli --cluster reshard does, calling
    ``between()`` (which waits for admits to happen) between the steps."""
    source_id, target_id = cluster.node_id(source), cluster.node_id(target)
    redis_cli(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    redis_cli(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    between()
    while keys := redis_cli(source, "CLUSTER", "GETKEYSINSLOT", str(slot), "1").split():
        redis_cli(
            source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "KEYS", *keys
        )  # one at a time
        between()
    for port in (target, source, *(n.port for n in cluster.nodes if n.port not in (source, target))):
        redis_cli(port, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)
    between()


async def _until(condition: Callable[[], bool], changed: asyncio.Event) -> None:
    while not condition():
        await changed.wait()
        changed.clear()


async def test_a_slot_migrating_under_load_keeps_limits_exact(cluster: Cluster) -> None:
    tenant, limit = "mover", 400
    keys = KeySpace()
    slot = key_slot(keys.usage(tenant, MONTH))
    source = cluster.owner_port(slot)
    target = next(n.port for n in cluster.nodes if n.port != source)
    store = RedisStore(cluster.url, timeout_s=2.0)
    rule = LimitRule(scope="key:k1", requests_per_minute=limit)
    now = time.time()
    seed = admission(rule, now_s=now, tenant=tenant)
    assert (await store.admit(seed)).allowed
    await store.settle(settlement(seed, cost_usd=0.1))  # the ledger and settled-set keys exist too
    outcomes: list[str] = ["allowed"]
    stop, tried = asyncio.Event(), asyncio.Event()

    async def admit_steadily() -> None:
        while not stop.is_set():
            try:
                decision = await store.admit(admission(rule, now_s=now, tenant=tenant))
                outcomes.append("allowed" if decision.allowed else "denied")
            except StoreUnavailable:
                outcomes.append("unavailable")
            tried.set()
            await asyncio.sleep(0.001)

    def between() -> None:  # in the migration's thread: wait for some admits to be tried
        seen = len(outcomes)
        deadline = time.monotonic() + 30
        while len(outcomes) < seen + 8 and time.monotonic() < deadline:
            time.sleep(0.005)

    tasks = [asyncio.get_running_loop().create_task(admit_steadily()) for _ in range(4)]
    try:
        async with asyncio.timeout(120):  # only catches a hang
            await asyncio.to_thread(_migrate, cluster, slot, source, target, between=between)
            await _until(lambda: outcomes.count("allowed") >= limit, tried)  # the limit, on the new owner
            seen = len(outcomes)
            await _until(lambda: len(outcomes) >= seen + 20, tried)  # and past it
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert cluster.owner_port(slot) == target
    window = await asyncio.to_thread(redis_cli, target, "HGET", keys.requests(tenant, "key:k1"), "t")
    print(
        f"\nslot {slot} moved {source} -> {target} under load: {len(outcomes)} admits, "
        f"{outcomes.count('allowed')} allowed, {outcomes.count('denied')} denied, "
        f"{outcomes.count('unavailable')} unavailable (TRYAGAIN while the tenant's keys were split)"
    )
    assert outcomes.count("allowed") == limit  # exact: none lost, none counted twice
    assert int(window) == limit  # Redis's own count agrees with the decisions
    assert outcomes[-20:] == ["denied"] * 20
    assert isinstance(store._fast, ClusterClient)
    assert store._fast._slots[slot] == ("127.0.0.1", target)  # learned from MOVED and the refresh
    await store.close()
