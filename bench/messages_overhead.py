"""What ``POST /v1/messages`` (Anthropic's format, translated at the edge) adds over the same request as
``POST /v1/chat/completions``, on one gateway, alternating round after round.

One gateway (the bench policy: one key, auth on, in-process store) pinned to one core, the canned nginx
upstream and wrk on another; wrk at ``--concurrency`` connections sends the same small request in each
format (plain, or ``--stream``), alternating which goes first. Reported: each format's median req/s,
p50 latency and gateway CPU ms per request, and the Messages route's added p50 (target: at most 0.1 ms
at concurrency 1).

    python bench/messages_overhead.py                        # concurrency 1, 10 rounds of 3 s
    python bench/messages_overhead.py --concurrency 16 --stream
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
from harness.targets import GatewayConfig, start_gateway
from harness.wrk import WrkRun, find_wrk, run_wrk

HERE = Path(__file__).resolve().parent
APIS = ("chat", "messages")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=int, default=3, help="seconds of each wrk run")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--stream", action="store_true", help="streamed requests (the SSE upstream)")
    parser.add_argument("--api-key", default="sk-sy-bench-0000000000000000")
    args = parser.parse_args()
    if find_wrk() is None:
        print("messages_overhead: wrk not found: apt-get install wrk", file=sys.stderr)
        return 1
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="sy-messages-") as tmp:
        work = Path(tmp)
        upstream = CannedUpstream(work, "0")
        upstream.start()
        stack.callback(upstream.stop)
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(args.api_key.encode()).hexdigest(),
        }
        target = start_gateway(
            GatewayConfig("gateway", HERE / "harness" / "policy.yaml.tmpl", {}),
            values,
            index=0,
            cpus="1",
            work_dir=work,
            num_workers=1,
            timeout_s=60,
        )
        stack.callback(target.process.stop)
        model = "bench-sse" if args.stream else "bench"
        urls = {"chat": target.json_url, "messages": target.base_url + "/messages"}
        rates: dict[str, list[float]] = {api: [] for api in APIS}
        p50s: dict[str, list[float]] = {api: [] for api in APIS}
        cpu_ms: dict[str, list[float]] = {api: [] for api in APIS}

        def run(api: str, duration_s: int) -> None:
            wrk = WrkRun(urls[api], args.concurrency, duration_s, model=model, is_stream=args.stream,
                         api_key=args.api_key, api=api)  # fmt: skip
            before = target.process.cpu_s()
            result = run_wrk(wrk)
            if result.num_requests == 0:
                raise BenchError(f"{api}: wrk completed no request ({result.errors})")
            rates[api].append(result.requests_per_s)
            p50s[api].append(result.p50_ms)
            cpu_ms[api].append((target.process.cpu_s() - before) * 1000 / result.num_requests)

        for api in APIS:  # warm-up
            run(api, 2)
        for figures in (rates, p50s, cpu_ms):
            for api in APIS:
                figures[api].clear()
        for index in range(args.rounds):
            for api in APIS if index % 2 == 0 else APIS[::-1]:
                run(api, args.duration)
            added = p50s["messages"][-1] - p50s["chat"][-1]
            print(f"round {index + 1}: messages adds {added * 1000:.0f} us p50", file=sys.stderr, flush=True)
    kind = "streamed" if args.stream else "plain"
    print(f"{kind}, c={args.concurrency}, {args.rounds} rounds of {args.duration} s\n")
    print("| route | req/s (median) | p50 ms (median) | gateway CPU ms/request (median) |")
    print("|---|---|---|---|")
    for api in APIS:
        path = "/v1/chat/completions" if api == "chat" else "/v1/messages"
        print(
            f"| {path} | {statistics.median(rates[api]):,.0f} | {statistics.median(p50s[api]):.3f} "
            f"| {statistics.median(cpu_ms[api]):.4f} |"
        )
    differences = [m - c for m, c in zip(p50s["messages"], p50s["chat"], strict=True)]
    print(
        f"\n/v1/messages adds {statistics.median(differences) * 1000:.0f} us p50 "
        "(median of the rounds; target: <= 100 us)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
