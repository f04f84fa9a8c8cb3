"""CPU per request of the gateway's own limits path, in process: auth, the limits stage, the settle.

    python -m bench.limits_path [--requests 20000]

Runs the real authentication (``authenticate``) and limits stage (``EnforceLimits``) on real
``Call`` objects with the bench policies of bench/overhead.py, sequentially, and prints the CPU
microseconds per request of:
the spine policy on the in-process store (no limits: the settle only feeds the ledger), and the
limits policy on MemoryStore, RedisStore and CreditStore (a FailoverStore around the last two, as
the gateway builds it). No HTTP: this is the part of a request that limits add. Redis: REDIS_URL,
else a redis-server started on a loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import time
from pathlib import Path

from bench.store_roundtrip import redis_url
from gateway.authentication import authenticate
from gateway.compiled import compile_policy
from gateway.pipeline import BytesResult, Call, Endpoint, Usage
from gateway.policy import load_policy
from gateway.stages.limits import EnforceLimits
from gateway.stores import CreditStore, FailoverStore, MemoryStore, RedisStore, Store

HARNESS = Path(__file__).resolve().parent / "harness"
API_KEY = "sk-sy-bench-0000000000000000"
BODY = {"model": "bench", "messages": [{"role": "user", "content": "hello there"}]}


def _policy(template: str, work: Path) -> Path:
    text = (HARNESS / template).read_text()
    text = text.replace("${NGINX_PORT}", "1").replace(
        "${API_KEY_SHA256}", hashlib.sha256(API_KEY.encode()).hexdigest()
    )
    path = work / template.removesuffix(".tmpl")
    path.write_text(text)
    return path


async def cpu_us_per_request(policy_path: Path, store: Store, num_requests: int) -> float:
    policy = compile_policy(load_policy(policy_path))
    limits = EnforceLimits(store)
    headers = {"authorization": f"Bearer {API_KEY}"}

    async def one(i: int) -> None:
        key = authenticate(policy, headers)
        call = Call(Endpoint.CHAT, BODY, headers, policy, f"bench-{i}", "bench", key=key)
        call.tenant = key.tenant if key is not None else "anonymous"
        call.pool = "bench"
        await limits(call)
        call.result = BytesResult(200, b"{}")
        call.usage = Usage(10, 5)
        await call.finish()

    for i in range(2000):  # warm up: token counter, key layouts, credit
        await one(i)
    started = time.process_time()
    for i in range(2000, 2000 + num_requests):
        await one(i)
    return (time.process_time() - started) / num_requests * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, redis_url() as url:
        work = Path(tmp)
        spine, limits = _policy("policy.yaml.tmpl", work), _policy("policy-limits.yaml.tmpl", work)
        print(f"{'policy':<8} {'store':<8} {'CPU us/request':>15}   (auth + limits stage + settle)")
        runs = ((spine, "memory"), (limits, "memory"), (limits, "redis"), (limits, "credit"))
        for policy_path, name in runs:
            store: Store = MemoryStore()
            if name != "memory":
                primary: Store = RedisStore(url, timeout_s=1.0)
                if name == "credit":
                    primary = CreditStore(primary)  # type: ignore[arg-type]
                store = FailoverStore(primary, MemoryStore(), mode="fail_open")
            cpu_us = await cpu_us_per_request(policy_path, store, args.requests)
            await store.close()
            label = "spine" if policy_path is spine else "limits"
            print(f"{label:<8} {name:<8} {cpu_us:>15.1f}")


if __name__ == "__main__":
    asyncio.run(main())
