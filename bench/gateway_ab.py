"""A/B of two gateway trees (two commits) on one policy: both up at once, wrk alternating between them.

``overhead.py --compare`` measures one configuration after another, each for a whole run; on a shared
VM whose speed drifts by a third within minutes, two runs minutes apart differ by more than the code
does. Here both gateways are started once (same nginx, same Redis, both pinned to --gateway-cpus, the
idle one only polls), and short wrk runs alternate between them (A B, B A, A B, ...), so each pair of
runs sees the same machine. The figure to read is the **median of the paired ratios** (after / before
req/s, one per round), with their geometric mean beside it; each side's medians are printed too.

    git worktree add /tmp/sy-before <commit>
    python bench/gateway_ab.py --before /tmp/sy-before                 # against this checkout
    python bench/gateway_ab.py --before /tmp/sy-before --after /tmp/sy-after --rounds 40 --duration 3

``--mode`` picks what wrk sends: ``upstream`` (default: a chat completion that goes upstream, no
``temperature`` so the response cache lets it by), ``miss`` (``temperature: 0`` and every body
different: each a response-cache miss that goes upstream and stores its entry), ``hit``
(``temperature: 0``, one body repeated: after the first, every request is a response-cache hit, from
Redis under the full policy) or ``stream`` (SSE from the canned stream).
``--policy harness/policy-full-nocache.yaml.tmpl`` is the full policy with the response cache off.
Besides req/s, each run reads the gateway's CPU seconds (utime + stime) and reports CPU milliseconds
per request, the figure that compares a hit with a miss.

The policy template (default: the full policy, ``harness/policy-full.yaml.tmpl``) gets ``${NGINX_PORT}``,
``${API_KEY_SHA256}`` and ``${REDIS_URL}`` filled in; each gateway gets ``SORTYARD_REDIS_URL`` and
``OTEL_TRACES_EXPORTER=console``, as overhead.py's full-policy rows do, plus any ``--env KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harness.errors import BenchError
from harness.nginx import CannedUpstream
from harness.redis import RedisServer
from harness.targets import REPO_ROOT, GatewayConfig, Target, start_gateway
from harness.wrk import WrkResult, WrkRun, find_wrk, run_wrk

FULL_POLICY = Path(__file__).resolve().parent / "harness" / "policy-full.yaml.tmpl"
SIDES = ("before", "after")
MODES = ("upstream", "miss", "hit", "stream")


def round_order(index: int) -> tuple[str, str]:
    """Which side goes first in round ``index`` (0-based): A B, B A, A B, ... so neither always
    runs second, on a machine that has just warmed up or cooled down."""
    return SIDES if index % 2 == 0 else (SIDES[1], SIDES[0])


def paired_summary(
    before: Sequence[WrkResult],
    after: Sequence[WrkResult],
    cpu_ms: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """Each side's medians and the paired after/before req/s ratios of the rounds; with ``cpu_ms``
    (side -> the gateway's CPU milliseconds per request of each round), its medians too."""
    if len(before) != len(after) or not before:
        raise ValueError("one result per side and round, at least one round")
    ratios = [a.requests_per_s / b.requests_per_s for a, b in zip(after, before, strict=True)]
    out: dict[str, Any] = {"rounds": len(ratios)}
    for side, results in zip(SIDES, (before, after), strict=True):
        out[side] = {
            "median_requests_per_s": round(statistics.median(r.requests_per_s for r in results), 1),
            "median_p50_ms": round(statistics.median(r.p50_ms for r in results), 3),
            "requests_per_s": [round(r.requests_per_s, 1) for r in results],
        }
        if cpu_ms is not None and cpu_ms.get(side):
            out[side]["median_cpu_ms_per_request"] = round(statistics.median(cpu_ms[side]), 4)
    out["median_ratio"] = round(statistics.median(ratios), 3)
    out["geometric_mean_ratio"] = round(statistics.geometric_mean(ratios), 3)
    out["ratios"] = [round(r, 3) for r in ratios]
    return out


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the tree to compare against")
    parser.add_argument(
        "--after", type=Path, default=REPO_ROOT, help="the tree under test (default: this one)"
    )
    parser.add_argument(
        "--policy", type=Path, default=FULL_POLICY, help="policy template (default: full policy)"
    )
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="for both gateways")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--duration", type=int, default=3, help="seconds of each wrk run")
    parser.add_argument("--concurrency", type=int, default=1, help="wrk connections")
    parser.add_argument("--mode", choices=MODES, default="upstream", help="what wrk sends (see above)")
    parser.add_argument("--api-key", default="sk-sy-bench-0000000000000000")
    parser.add_argument("--client-cpus", default="0", help="taskset CPUs of wrk, nginx and redis")
    parser.add_argument("--gateway-cpus", default="1", help="taskset CPUs of both gateways")
    parser.add_argument("--json-out", type=Path)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if find_wrk() is None:
        raise BenchError("wrk not found: apt-get install wrk")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for side, tree in trees.items():
        if not (tree / "gateway" / "__main__.py").is_file():
            raise BenchError(f"--{side} {tree}: not a Sortyard tree (no gateway/__main__.py)")
    extra = dict(item.split("=", 1) for item in args.env)
    with ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sy-ab-")))
        upstream = CannedUpstream(work_dir, args.client_cpus)
        upstream.start()
        stack.callback(upstream.stop)
        redis = RedisServer(work_dir, args.client_cpus)
        redis.start()
        stack.callback(redis.stop)
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(args.api_key.encode()).hexdigest(),
            "REDIS_URL": redis.url,
        }
        env = {"SORTYARD_REDIS_URL": "${REDIS_URL}", "OTEL_TRACES_EXPORTER": "console", **extra}
        targets: dict[str, Target] = {}
        for index, side in enumerate(SIDES):
            config = GatewayConfig(side, args.policy, env)
            targets[side] = target = start_gateway(
                config,
                values,
                index=index,
                cpus=args.gateway_cpus,
                work_dir=work_dir,
                num_workers=1,
                timeout_s=60.0,
                repo_root=trees[side],
            )
            stack.callback(target.process.stop)

        cpu_ms: dict[str, list[float]] = {side: [] for side in SIDES}

        def wrk(side: str, duration_s: int) -> WrkResult:
            run = WrkRun(
                targets[side].json_url,
                args.concurrency,
                duration_s,
                model="bench-sse" if args.mode == "stream" else "bench",
                is_stream=args.mode == "stream",
                api_key=args.api_key,
                cpus=args.client_cpus,
                temperature="0" if args.mode in ("hit", "miss") else None,
                is_unique=args.mode == "miss",
            )
            cpu_before = targets[side].process.cpu_s()
            result = run_wrk(run)
            if result.num_requests == 0:
                raise BenchError(f"{side}: wrk completed no request ({result.errors})")
            cpu_ms[side].append((targets[side].process.cpu_s() - cpu_before) * 1000 / result.num_requests)
            return result

        for side in SIDES:  # warm-up: connections, caches (the hit's entry), the classifier's first calls
            wrk(side, 2)
        cpu_ms = {side: [] for side in SIDES}
        results: dict[str, list[WrkResult]] = {side: [] for side in SIDES}
        for index in range(args.rounds):
            for side in round_order(index):
                results[side].append(wrk(side, args.duration))
            before, after = results["before"][-1], results["after"][-1]
            print(
                f"round {index + 1}: before {before.requests_per_s:,.0f} req/s p50 {before.p50_ms:.3f} ms, "
                f"after {after.requests_per_s:,.0f} req/s p50 {after.p50_ms:.3f} ms, "
                f"ratio {after.requests_per_s / before.requests_per_s:.3f}",
                file=sys.stderr,
                flush=True,
            )
    summary = paired_summary(results["before"], results["after"], cpu_ms)
    summary["trees"] = {side: str(tree) for side, tree in trees.items()}
    summary["plan"] = {
        "mode": args.mode,
        "policy": str(args.policy),
        "duration_s": args.duration,
        "concurrency": args.concurrency,
    }
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        summary = run(args)
    except BenchError as error:
        print(f"gateway_ab: {error}", file=sys.stderr)
        return 1
    for side in SIDES:
        figures = summary[side]
        cpu = figures.get("median_cpu_ms_per_request")
        print(
            f"{side}: median {figures['median_requests_per_s']:,.1f} req/s, p50 {figures['median_p50_ms']} ms"
            + (f", gateway CPU {cpu} ms/request" if cpu is not None else "")
        )
    print(
        f"after / before req/s over {summary['rounds']} paired rounds: median {summary['median_ratio']}, "
        f"geometric mean {summary['geometric_mean_ratio']}"
    )
    if args.json_out:
        args.json_out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
