"""RedisStore on a real Redis: keys, clients, failures, and exactness across replicas.

How its scripts are run (NOSCRIPT, batching, the timeout) is tested in test_script_runner.py."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from gateway.redis_client.commands import RespCommands
from gateway.stores import BudgetRule, LimitRule, RedisStore, StoreUnavailable
from tests.gateway.stores.conftest import MONTH, T0, admission, settlement
from tools.servers.redis_server import RedisServer

ALL_KINDS = LimitRule(scope="key:k1", requests_per_minute=10, tokens_per_minute=1000, max_concurrent=3)


async def test_every_key_of_a_request_is_prefixed_hash_tagged_and_expires(
    redis_stores: Callable[..., RedisStore], redis_flushed: str
) -> None:
    store = redis_stores()
    rules = (ALL_KINDS, LimitRule(scope="pool:gpu", requests_per_minute=5, tokens_per_minute=500))
    adm = admission(*rules, now_s=T0, reserve_tokens=100, budgets=(BudgetRule("tenant", 10.0),))
    assert (await store.admit(adm)).allowed
    await store.settle(settlement(adm, input_tokens=10, output_tokens=5, cost_usd=0.1))
    second = admission(*rules, now_s=T0 + 1, reserve_tokens=100)
    assert (await store.admit(second)).allowed  # leaves a lease behind
    client = aioredis.Redis.from_url(redis_flushed, decode_responses=True)
    try:
        keys: list[str] = sorted(await client.keys("*"))  # type: ignore[arg-type]
        assert all(k.startswith("sy:{t:acme}:") for k in keys), keys
        assert len({key_slot(k.encode()) for k in keys}) == 1
        kinds = {k.split(":")[3] for k in keys}
        assert kinds == {"rpm", "tpm", "conc", "usage", "settled"}
        for key in keys:
            ttl = await client.ttl(key)
            assert 0 < ttl <= 400 * 86400, (key, ttl)
    finally:
        await client.aclose()


async def test_a_client_passed_in_is_used_and_left_open(redis_flushed: str) -> None:
    client = RespCommands.from_url(redis_flushed)
    store = RedisStore(client, timeout_s=2.0)
    adm = admission(ALL_KINDS, now_s=T0, reserve_tokens=10)
    assert (await store.admit(adm)).allowed
    await store.settle(settlement(adm, input_tokens=3, key_id="kx"))
    assert (await store.usage(MONTH)).tenants["acme"].keys["kx"].input_tokens == 3
    assert await store.ping()
    await store.close()
    assert await client.ping()
    await client.close()


async def test_a_stopped_redis_fails_fast_and_recovery_needs_no_restart(own_redis: RedisServer) -> None:
    store = RedisStore(own_redis.url, timeout_s=0.1)
    try:
        assert (await store.admit(admission(ALL_KINDS, now_s=T0))).allowed
        own_redis.stop()
        for _ in range(3):
            started = time.perf_counter()
            with pytest.raises(StoreUnavailable):
                await store.admit(admission(ALL_KINDS, now_s=T0 + 1))
            assert time.perf_counter() - started < 0.5  # refused at once, no retries
        assert await store.ping() is False
        with pytest.raises(StoreUnavailable):
            await store.usage(MONTH)
        own_redis.start()  # same port, empty, no scripts loaded
        assert (await store.admit(admission(ALL_KINDS, now_s=T0 + 2))).allowed
        assert await store.ping() is True
    finally:
        await store.close()


async def _fire(ids: range, concurrency: int, job: Callable[[int], object]) -> None:
    """Run ``job(i)`` for every i in ``ids`` with ``concurrency`` in flight."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in ids:
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            await job(queue.get_nowait())  # type: ignore[misc]

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def test_three_replicas_admit_exactly_the_requests_limit(
    redis_stores: Callable[..., RedisStore],
) -> None:
    replicas = [redis_stores() for _ in range(3)]
    rule = LimitRule(scope="key:k1", requests_per_minute=300)
    admitted = 0

    async def one(i: int) -> None:
        nonlocal admitted
        decision = await replicas[i % 3].admit(admission(rule, now_s=T0 + i * 0.001))
        admitted += decision.allowed

    await _fire(range(2000), 64, one)
    assert admitted == 300


async def test_three_replicas_never_exceed_the_tokens_limit_and_the_ledger_adds_up(
    redis_stores: Callable[..., RedisStore], redis_flushed: str
) -> None:
    replicas = [redis_stores() for _ in range(3)]
    limit = 200_000
    rule = LimitRule(scope="key:k1", tokens_per_minute=limit, max_concurrent=64)
    rng = random.Random(11)
    settled: list[tuple[int, int, float]] = []
    admitted_reserved = 0

    async def one(i: int) -> None:
        nonlocal admitted_reserved
        replica = replicas[i % 3]
        adm = admission(rule, now_s=T0 + i * 0.001, reserve_tokens=rng.randint(100, 2000))
        if not (await replica.admit(adm)).allowed:
            return
        admitted_reserved += adm.reserve_tokens
        await asyncio.sleep(rng.random() * 0.002)
        used = rng.randint(0, adm.reserve_tokens)
        input_tokens = rng.randint(0, used)
        cost = round(used * 1e-6, 9)
        done = settlement(adm, input_tokens=input_tokens, output_tokens=used - input_tokens, cost_usd=cost)
        await replicas[(i + 1) % 3].settle(done)  # any replica may settle
        await replicas[(i + 2) % 3].settle(done)  # a repeat (stream end + disconnect) is a no-op
        settled.append((input_tokens, used - input_tokens, cost))

    await _fire(range(2000), 64, one)
    total_used = sum(i + o for i, o, _ in settled)
    assert admitted_reserved > limit  # settles freed capacity that later requests used
    assert total_used <= limit
    client = aioredis.Redis.from_url(redis_flushed, decode_responses=True)
    try:
        window = await client.hgetall("sy:{t:acme}:tpm:key:k1")
        buckets = {k: v for k, v in window.items() if k not in ("t", "lo", "hi")}
        assert sum(int(v) for v in buckets.values()) == total_used  # nothing reserved is left behind
        assert int(window["t"]) == total_used  # and the window's running total agrees
        assert await client.zcard("sy:{t:acme}:conc:key:k1") == 0
    finally:
        await client.aclose()
    ledger = (await replicas[0].usage(MONTH)).tenants["acme"]
    assert ledger.total.requests == len(settled)
    assert ledger.total.input_tokens == sum(i for i, _, _ in settled)
    assert ledger.total.output_tokens == sum(o for _, o, _ in settled)
    assert ledger.total.cost_usd == pytest.approx(sum(c for _, _, c in settled))
    assert ledger.keys["k1"] == ledger.total and ledger.pools["default"] == ledger.total


def _replica_process(url: str, mode: str, first: int, num_requests: int, concurrency: int) -> list[int]:
    """One simulated gateway process: its own event loop and RedisStore. Returns what it admitted:
    1 per admitted request (mode "requests"), or the settled token usage of each (mode "tokens")."""

    async def main() -> list[int]:
        store = RedisStore(url, timeout_s=2.0)
        rng = random.Random(first)
        rules = {
            "requests": LimitRule(scope="key:k1", requests_per_minute=300),
            "tokens": LimitRule(scope="key:k1", tokens_per_minute=100_000),
        }
        results: list[int] = []

        async def one(i: int) -> None:
            adm = admission(
                rules[mode], now_s=T0 + i * 0.001, reserve_tokens=rng.randint(100, 2000), request_id=f"p{i}"
            )
            if not (await store.admit(adm)).allowed:
                return
            used = rng.randint(0, adm.reserve_tokens) if mode == "tokens" else 0
            await store.settle(settlement(adm, input_tokens=used, cost_usd=used * 1e-6))
            results.append(used if mode == "tokens" else 1)

        await _fire(range(first, first + num_requests), concurrency, one)
        await store.close()
        return results

    return asyncio.run(main())


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["requests", "tokens"])
async def test_three_gateway_processes_share_one_redis_exactly(redis_flushed: str, mode: str) -> None:
    """The issue's acceptance check at the store level: 3 OS processes, 2,000 requests, concurrency 64."""
    import concurrent.futures
    import multiprocessing

    spans = [(0, 667, 22), (667, 667, 21), (1334, 666, 21)]  # (first id, requests, concurrency)
    with concurrent.futures.ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_replica_process, redis_flushed, mode, *span) for span in spans]
        results = [f.result(timeout=120) for f in futures]
    admitted = [x for r in results for x in r]
    if mode == "requests":
        assert len(admitted) == 300
    else:
        assert sum(admitted) <= 100_000
        store = RedisStore(redis_flushed, timeout_s=2.0)
        ledger = (await store.usage(MONTH)).tenants["acme"].total
        await store.close()
        assert (ledger.requests, ledger.input_tokens) == (len(admitted), sum(admitted))
