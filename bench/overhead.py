"""Gateway overhead benchmark: wrk -> gateway -> canned nginx, against wrk -> nginx direct.

Starts nginx (the canned upstream), the bare forwarder (``harness/standin.py``) and one gateway per
configuration, all pinned with taskset (wrk and nginx on --client-cpus, the Python servers on
--gateway-cpus), checks each answers one plain and one streamed request, warms them up, then measures
req/s and p50/p99 at every --concurrency, streams/s of the 20-chunk SSE body, CPU per request and RSS.
Prints a markdown table on stdout (progress goes to stderr); --json-out writes every figure.

    python bench/overhead.py                                   # nginx, bare forwarder, gateway (bench policy)
    python bench/overhead.py --compare base=a.yaml redis=b.yaml,SORTYARD_REDIS_URL='${REDIS_URL}' --redis
    python bench/overhead.py --no-gateway --duration 1 --concurrency 1,16
    python bench/overhead.py --json-body long --accept-encoding gzip --no-standin \
        --compare off=bench/harness/policy.yaml.tmpl on=bench/harness/policy-compression.yaml.tmpl

A gateway configuration is ``[LABEL=]POLICY[,KEY=VALUE...]``: a policy file in which ``${NGINX_PORT}``,
``${API_KEY_SHA256}`` (of --api-key) and ``${REDIS_URL}`` (with --redis) are filled in, plus
environment for that gateway only.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import signal
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from harness.errors import BenchError
from harness.measure import Plan, measure
from harness.nginx import JSON_BODIES, CannedUpstream, nginx_version
from harness.redis import RedisServer
from harness.report import (
    GOAL_SETS,
    Goals,
    check_goals,
    check_within,
    markdown_table,
    noise_notes,
    summarize,
    to_json,
)
from harness.targets import (
    POLICY_TEMPLATE,
    GatewayConfig,
    Target,
    direct_target,
    parse_gateway_spec,
    probe,
    start_gateway,
    start_standin,
)
from harness.wrk import find_wrk, wrk_version


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured run (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per target and endpoint")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated connection counts")
    parser.add_argument("--stream-concurrency", type=int, default=16, help="connections for the SSE run")
    parser.add_argument("--rounds", type=int, default=1, help="repeat all runs, interleaved; report medians")
    parser.add_argument(
        "--policy", metavar="SPEC", help="one gateway configuration (default: the bench policy)"
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="SPEC",
        default=[],
        help="several gateway configurations measured side by side in this run",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for every gateway (repeatable)",
    )
    parser.add_argument(
        "--api-key", default="sk-sy-bench-0000000000000000", help="Bearer token on every request"
    )
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes (--workers N)")
    parser.add_argument(
        "--json-body",
        choices=sorted(JSON_BODIES),
        default="short",
        help="the canned plain answer: short (~340 bytes) or long (~2.7 KB, over the compression threshold)",
    )
    parser.add_argument(
        "--accept-encoding",
        default="",
        metavar="VALUE",
        help="Accept-Encoding on every wrk request, e.g. gzip (default: none, nothing is compressed)",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help="start a redis-server on --client-cpus and fill ${REDIS_URL} with its URL",
    )
    parser.add_argument("--no-gateway", action="store_true", help="measure nginx and the bare forwarder only")
    parser.add_argument("--no-standin", action="store_true", help="skip the bare forwarder row")
    parser.add_argument("--client-cpus", default="0", help="taskset CPUs of wrk, nginx and redis (default 0)")
    parser.add_argument(
        "--gateway-cpus", default="1", help="taskset CPUs of the gateway and forwarder (default 1)"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not use taskset")
    parser.add_argument(
        "--start-timeout", type=float, default=60.0, help="seconds for a server to get healthy"
    )
    parser.add_argument("--json-out", type=Path, help="write every figure as JSON to this file")
    parser.add_argument("--check-goals", action="store_true", help="exit 2 when a gateway row misses a goal")
    parser.add_argument(
        "--goals",
        action="append",
        default=[],
        metavar="LABEL=SET",
        help=f"targets for one row, a set of {sorted(GOAL_SETS)} (default: spine for every gateway row)",
    )
    parser.add_argument(
        "--within",
        action="append",
        default=[],
        metavar="LABEL=BASE:FRACTION",
        help="a goal: LABEL's req/s at c=16 is at most FRACTION below BASE's (limits=spine:0.2)",
    )
    parser.add_argument(
        "--keep-dir", action="store_true", help="keep the temp dir (configs, logs) afterwards"
    )
    args = parser.parse_args(argv)
    for spec in args.goals:
        if spec.partition("=")[2] not in GOAL_SETS:
            parser.error(f"--goals {spec!r}: the set must be one of {sorted(GOAL_SETS)}")
    for spec in args.within:
        fraction = spec.partition("=")[2].partition(":")[2]
        try:
            float(fraction)
        except ValueError:
            parser.error(f"--within {spec!r}: expected LABEL=BASE:FRACTION, e.g. limits=spine:0.2")
    return args


def _gateway_configs(args: argparse.Namespace) -> list[GatewayConfig]:
    if args.no_gateway:
        return []
    specs = args.compare or [args.policy or f"gateway={POLICY_TEMPLATE}"]
    configs = [parse_gateway_spec(spec) for spec in specs]
    common = dict(entry.split("=", 1) for entry in args.env)
    configs = [GatewayConfig(c.label, c.policy_template, {**common, **c.env}) for c in configs]
    labels = [c.label for c in configs]
    if len(set(labels)) != len(labels):
        raise BenchError(f"gateway labels must differ: {labels} (name them LABEL=POLICY)")
    return configs


def _check_cpus(*cpu_lists: str | None) -> None:
    allowed = os.sched_getaffinity(0)
    for cpus in cpu_lists:
        for part in (cpus or "").split(","):
            if not part:
                continue
            first, _, last = part.partition("-")
            wanted = set(range(int(first), int(last or first) + 1))
            if not wanted <= allowed:
                raise BenchError(
                    f"CPUs {cpus} not available (have {sorted(allowed)}); use --no-pin or other CPUs"
                )


def run(args: argparse.Namespace) -> int:
    wrk = find_wrk()
    if wrk is None:
        raise BenchError("wrk not found: apt-get install wrk")
    for entry in args.env:
        if "=" not in entry:
            raise BenchError(f"--env wants KEY=VALUE, got {entry!r}")
    client_cpus = None if args.no_pin else args.client_cpus
    gateway_cpus = None if args.no_pin else args.gateway_cpus
    _check_cpus(client_cpus, gateway_cpus)
    concurrencies = tuple(int(c) for c in args.concurrency.split(",") if c)
    plan = Plan(
        args.duration,
        args.warmup,
        concurrencies,
        args.stream_concurrency,
        args.api_key,
        client_cpus,
        args.rounds,
        args.accept_encoding,
    )
    configs = _gateway_configs(args)
    loadavg_before = os.getloadavg()

    with ExitStack() as stack:
        work_dir = (
            Path(tempfile.mkdtemp(prefix="sy-bench-"))
            if args.keep_dir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sy-bench-")))
        )
        print(f"work dir {work_dir}", file=sys.stderr)
        upstream = CannedUpstream(work_dir, client_cpus, json_body=JSON_BODIES[args.json_body])
        stack.callback(upstream.stop)
        upstream.start()
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(args.api_key.encode()).hexdigest(),
        }
        if args.redis:
            redis = RedisServer(work_dir, client_cpus)
            stack.callback(redis.stop)
            redis.start()
            values["REDIS_URL"] = redis.url

        targets: list[Target] = [direct_target(upstream)]
        if not args.no_standin:
            targets.append(start_standin(upstream, gateway_cpus, work_dir, args.start_timeout))
            stack.callback(targets[-1].process.stop)
        for index, config in enumerate(configs):
            target = start_gateway(
                config,
                values,
                index=index,
                cpus=gateway_cpus,
                work_dir=work_dir,
                num_workers=args.workers,
                timeout_s=args.start_timeout,
            )
            stack.callback(target.process.stop)
            targets.append(target)
        for target in targets:
            probe(target, args.api_key, args.accept_encoding)

        points = measure(targets, plan)
        rss_mib = {t.label: t.process.rss_mib() for t in targets}
        rows = summarize(targets, points, rss_mib)

    table = markdown_table(rows, concurrencies, args.stream_concurrency)
    per_label = {label: GOAL_SETS[name] for label, name in (_pair(spec, "=") for spec in args.goals)}
    within = []
    for spec in args.within:
        label, rest = _pair(spec, "=")
        base, fraction = _pair(rest, ":")
        within.append((label, base, float(fraction)))
    goal_lines = check_goals(rows, Goals(), args.stream_concurrency, per_label) + check_within(rows, within)
    notes = noise_notes(rows)
    print(table)
    if goal_lines:
        where = f"{args.workers} workers on CPUs {gateway_cpus}" if args.workers > 1 else "one core"
        print(f"\nGoals (gateway on {where}):\n" + "\n".join(f"- {line}" for line in goal_lines))
    if notes:
        print("\nNotes:\n" + "\n".join(f"- {line}" for line in notes))
    if args.json_out:
        meta = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "plan": asdict(plan),
            "gateway_cpus": gateway_cpus,
            "workers": args.workers,
            "json_body": args.json_body,
            "accept_encoding": args.accept_encoding,
            "num_cpus": os.cpu_count(),
            "loadavg_before": loadavg_before,
            "sortyard_env": {k: v for k, v in os.environ.items() if k.startswith("SORTYARD_")},
            "loadavg_after": os.getloadavg(),
            "python": platform.python_version(),
            "wrk": wrk_version(wrk),
            "nginx": nginx_version(upstream.binary),
            "goals": asdict(Goals()),
            "goal_check": goal_lines,
            "noise_notes": notes,
            "table": table,
        }
        args.json_out.write_text(json.dumps(to_json(meta, rows, points), indent=2) + "\n")
    missed = any("MISS" in line for line in goal_lines)
    return 2 if args.check_goals and missed else 0


def _pair(spec: str, sep: str) -> tuple[str, str]:
    head, found, tail = spec.partition(sep)
    if not found or not head or not tail:
        raise BenchError(f"expected A{sep}B, got {spec!r}")
    return head, tail


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds the ExitStack, which stops every child


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return run(args)
    except BenchError as exc:
        print(f"overhead: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
