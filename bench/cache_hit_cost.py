"""What a response-cache hit costs the gateway against a miss: CPU per request, on one gateway, alternating.

One gateway (the full policy: keys, Redis limits, the response cache in Redis, metrics, 1% tracing,
the access log), pinned to one core; wrk at ``--concurrency`` connections alternates, round after
round, between three kinds of request, so every kind sees the same machine:

- ``miss``: ``temperature: 0`` and every body different: a response-cache miss that goes upstream and
  stores its entry;
- ``hit``: ``temperature: 0``, one body repeated: served from Redis;
- ``upstream``: no ``temperature``: the cache lets it by, it goes upstream.

Reported: each kind's median req/s and gateway CPU milliseconds per request (utime + stime of the
gateway's process over the run, divided by its requests), and the hit's CPU over the miss's.

    python bench/cache_hit_cost.py                     # 10 rounds of 3 s each
    python bench/cache_hit_cost.py --tree /tmp/sy-before --rounds 20
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from harness.errors import BenchError
from harness.nginx import CannedUpstream
from harness.redis import RedisServer
from harness.targets import REPO_ROOT, GatewayConfig, start_gateway
from harness.wrk import WrkRun, find_wrk, run_wrk

HERE = Path(__file__).resolve().parent
KINDS = ("miss", "hit", "upstream")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=int, default=3, help="seconds of each wrk run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tree", type=Path, default=REPO_ROOT, help="the gateway tree to run")
    parser.add_argument("--api-key", default="sk-sy-bench-0000000000000000")
    args = parser.parse_args()
    if find_wrk() is None:
        print("cache_hit_cost: wrk not found: apt-get install wrk", file=sys.stderr)
        return 1
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="sy-hit-") as tmp:
        work = Path(tmp)
        upstream = CannedUpstream(work, "0")
        upstream.start()
        stack.callback(upstream.stop)
        redis = RedisServer(work, "0")
        redis.start()
        stack.callback(redis.stop)
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(args.api_key.encode()).hexdigest(),
            "REDIS_URL": redis.url,
        }
        env = {"SORTYARD_REDIS_URL": redis.url, "OTEL_TRACES_EXPORTER": "console"}
        target = start_gateway(
            GatewayConfig("gateway", HERE / "harness" / "policy-full.yaml.tmpl", env),
            values,
            index=0,
            cpus="1",
            work_dir=work,
            num_workers=1,
            timeout_s=60,
            repo_root=args.tree.resolve(),
        )
        stack.callback(target.process.stop)
        rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
        cpu_ms: dict[str, list[float]] = {kind: [] for kind in KINDS}

        def run(kind: str, duration_s: int) -> None:
            wrk = WrkRun(
                target.json_url,
                args.concurrency,
                duration_s,
                api_key=args.api_key,
                temperature=None if kind == "upstream" else "0",
                is_unique=kind == "miss",
            )
            before = target.process.cpu_s()
            result = run_wrk(wrk)
            if result.num_requests == 0:
                raise BenchError(f"{kind}: wrk completed no request ({result.errors})")
            rates[kind].append(result.requests_per_s)
            cpu_ms[kind].append((target.process.cpu_s() - before) * 1000 / result.num_requests)

        for kind in KINDS:  # warm-up: connections, the hit's entry
            run(kind, 2)
        for kind in KINDS:
            rates[kind].clear()
            cpu_ms[kind].clear()
        for index in range(args.rounds):
            order = KINDS[index % 3 :] + KINDS[: index % 3]  # each kind first in turn
            for kind in order:
                run(kind, args.duration)
            print(
                f"round {index + 1}: " + ", ".join(f"{kind} {cpu_ms[kind][-1]:.4f} ms" for kind in KINDS),
                file=sys.stderr,
                flush=True,
            )
    print(f"tree {args.tree.resolve()}, c={args.concurrency}, {args.rounds} rounds of {args.duration} s\n")
    print("| request | req/s (median) | gateway CPU ms/request (median) |")
    print("|---|---|---|")
    for kind in KINDS:
        print(f"| {kind} | {statistics.median(rates[kind]):,.0f} | {statistics.median(cpu_ms[kind]):.4f} |")
    ratios = [hit / miss for hit, miss in zip(cpu_ms["hit"], cpu_ms["miss"], strict=True)]
    print(f"\nhit / miss CPU: median of the rounds' ratios {statistics.median(ratios):.3f} (target: <= 0.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
