"""Memory soak: the gateway's RSS over a long run (default 1M requests) with the full policy on.

wrk drives the gateway (pinned as in bench/overhead.py) in slices of --slice-s seconds until
--requests have been served; after each slice the gateway's RSS is read from /proc. Reported: RSS
after warm-up, at half and at the end, and the growth over the second half (target: at most
100 MiB per worker, growing under 5% over the second half).

    python bench/soak.py                                   # 1M requests, full policy, Redis limits
    python bench/soak.py --requests 200000 --policy bench/harness/policy.yaml.tmpl --no-redis
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from harness.nginx import CannedUpstream
from harness.redis import RedisServer
from harness.targets import GatewayConfig, start_gateway
from harness.wrk import WrkRun, run_wrk

HERE = Path(__file__).resolve().parent


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--policy", default=str(HERE / "harness" / "policy-full.yaml.tmpl"))
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--slice-s", type=int, default=10)
    parser.add_argument("--api-key", default="sk-sy-bench-0000000000000000")
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="sy-soak-") as tmp:
        work = Path(tmp)
        upstream = CannedUpstream(work, "0")
        upstream.start()
        stack.callback(upstream.stop)
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(args.api_key.encode()).hexdigest(),
        }
        env: dict[str, str] = {}
        if not args.no_redis:
            redis = RedisServer(work, "0")
            redis.start()
            stack.callback(redis.stop)
            values["REDIS_URL"] = redis.url
            env["SORTYARD_REDIS_URL"] = redis.url
        target = start_gateway(
            GatewayConfig("gateway", Path(args.policy), env),
            values,
            index=0,
            cpus="1",
            work_dir=work,
            num_workers=1,
            timeout_s=60,
        )
        stack.callback(target.process.stop)
        served, samples = 0, []
        started = time.monotonic()
        while served < args.requests:
            result = run_wrk(WrkRun(target.json_url, args.concurrency, args.slice_s, api_key=args.api_key))
            if result.num_errors:
                print(f"errors: {result.errors}", file=sys.stderr)
                return 1
            served += result.num_requests
            samples.append((served, rss_mib(target.process.pid)))
            print(
                f"{served:>9,} requests  {result.requests_per_s:>7,.0f} req/s  RSS {samples[-1][1]:.1f} MiB",
                file=sys.stderr,
                flush=True,
            )
        half = min(samples, key=lambda s: abs(s[0] - served / 2))
        first, last = samples[0], samples[-1]
        growth = 100 * (last[1] - half[1]) / half[1]
        print(
            f"| requests | RSS after {first[0]:,} | RSS at {half[0]:,} | RSS at {last[0]:,} "
            "| growth, 2nd half | wall |"
        )
        print("|---|---|---|---|---|---|")
        print(
            f"| {served:,} | {first[1]:.1f} MiB | {half[1]:.1f} MiB | {last[1]:.1f} MiB | {growth:+.1f}% | "
            f"{time.monotonic() - started:.0f} s |"
        )
        ok = last[1] <= 100 and growth < 5
        print(f"\ntarget (<= 100 MiB, < 5% growth over the second half): {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
