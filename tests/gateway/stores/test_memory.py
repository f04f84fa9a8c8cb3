"""MemoryStore specifics: what it keeps stays bounded as the clock moves."""

from __future__ import annotations

from gateway.stores import LimitRule, MemoryStore
from tests.gateway.stores.conftest import T0, admission, settlement


async def test_idle_windows_leases_and_markers_are_swept() -> None:
    store = MemoryStore(settled_ttl_s=120)
    for i in range(50):
        rule = LimitRule(scope=f"key:k{i}", requests_per_minute=10, tokens_per_minute=100, max_concurrent=2)
        adm = admission(rule, now_s=T0, reserve_tokens=5, lease_ttl_s=30)
        assert (await store.admit(adm)).allowed
        if i % 2:
            await store.settle(settlement(adm, input_tokens=1, now_s=T0))
    assert len(store._windows) == 100 and len(store._settled) == 25
    await store.admit(admission(now_s=T0 + 200))  # minutes later: everything above is stale
    assert store._windows == {} and store._leases == {} and len(store._settled) == 0


async def test_only_the_last_13_months_of_ledger_are_kept() -> None:
    store = MemoryStore()
    for month in range(1, 16):
        adm = admission(now_s=T0, month=f"2025-{month:02d}" if month <= 12 else f"2026-{month - 12:02d}")
        await store.settle(settlement(adm, input_tokens=1))
    assert (await store.usage("2025-02")).tenants == {}
    assert (await store.usage("2025-03")).tenants["acme"].total.requests == 1
    assert (await store.usage("2026-03")).tenants["acme"].total.requests == 1


async def test_settled_ids_are_bounded_in_number() -> None:
    from gateway.stores import memory
    from tests.gateway.stores.conftest import T0, admission, settlement

    store = memory.MemoryStore()
    for _ in range(memory._MAX_SETTLED_IDS + 10):
        await store.settle(settlement(admission(now_s=T0), now_s=T0))
    assert len(store._settled) == memory._MAX_SETTLED_IDS
