"""What terminating TLS costs the gateway: plain HTTP against HTTPS, both up at once, wrk alternating.

    python bench/tls_cost.py [--rounds 8] [--duration 3] [--concurrency 16]

One nginx canned upstream, two gateways on the bench policy (``harness/policy.yaml.tmpl``), both pinned
to ``--gateway-cpus``: one plain, one serving HTTPS from a certificate made here (EC P-256, TLS 1.3
with the defaults of Python's ``ssl``). wrk keeps ``--concurrency`` connections alive (so a handshake
is paid once per connection, as clients with a connection pool pay it) and alternates between the two
(plain, TLS; TLS, plain; ...), so each pair of runs sees the same machine. The figure is the median of
the paired ratios (TLS req/s / plain req/s); the target is 0.70 or more at 16 connections.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.errors import BenchError
from harness.nginx import CannedUpstream
from harness.processes import ManagedProcess, ProcessSpec
from harness.targets import REPO_ROOT, fill
from harness.wrk import WrkRun, find_wrk, run_wrk

from tests.support.certs import CertificateAuthority
from tools.servers.redis_server import free_port

POLICY = Path(__file__).resolve().parent / "harness" / "policy.yaml.tmpl"
API_KEY = "sk-sy-bench-0000000000000000"
SIDES = ("plain", "tls")


def start(
    side: str, work_dir: Path, values: dict[str, str], cpus: str, tls: tuple[str, ...]
) -> tuple[Any, str]:
    policy = work_dir / f"policy-{side}.yaml"
    policy.write_text(fill(POLICY.read_text(), values))
    port = free_port()
    argv = (sys.executable, "-m", "gateway", "serve", "--policy", str(policy), "--port", str(port), *tls)
    process = ManagedProcess(ProcessSpec(f"gateway-{side}", argv, cpus, work_dir, {}, cwd=REPO_ROOT))
    process.start()
    deadline = time.monotonic() + 60
    while True:
        process.check_alive()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError(f"{side}: the gateway did not listen within 60 s") from None
            time.sleep(0.1)
    scheme = "https" if tls else "http"
    return process, f"{scheme}://127.0.0.1:{port}/v1/chat/completions"


def run(args: argparse.Namespace) -> dict[str, Any]:
    if find_wrk() is None:
        raise BenchError("wrk not found: apt-get install wrk")
    with ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sy-tls-")))
        upstream = CannedUpstream(work_dir, args.client_cpus)
        upstream.start()
        stack.callback(upstream.stop)
        issued = CertificateAuthority(work_dir).issue("server")
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(API_KEY.encode()).hexdigest(),
        }
        urls: dict[str, str] = {}
        for side in SIDES:
            tls = ("--tls-cert", str(issued.cert), "--tls-key", str(issued.key)) if side == "tls" else ()
            process, urls[side] = start(side, work_dir, values, args.gateway_cpus, tls)
            stack.callback(process.stop)
        req_s: dict[str, list[float]] = {side: [] for side in SIDES}
        ratios: list[float] = []
        for side in SIDES:  # warm both up (connections, caches, the first handshake)
            run_wrk(
                WrkRun(urls[side], args.concurrency, 1, model="bench", api_key=API_KEY, cpus=args.client_cpus)
            )
        for i in range(args.rounds):
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            got = {}
            for side in order:
                run_ = WrkRun(
                    urls[side],
                    args.concurrency,
                    args.duration,
                    model="bench",
                    api_key=API_KEY,
                    cpus=args.client_cpus,
                )
                got[side] = run_wrk(run_).requests_per_s
                req_s[side].append(got[side])
            ratios.append(got["tls"] / got["plain"])
    return {
        "median_req_s": {side: round(statistics.median(req_s[side]), 1) for side in SIDES},
        "median_ratio_tls_over_plain": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "args": vars(args),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--duration", type=int, default=3, help="seconds of each wrk run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--client-cpus", default="0", help="taskset CPUs of wrk and nginx")
    parser.add_argument("--gateway-cpus", default="1", help="taskset CPUs of both gateways")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(run(args), indent=2))
    except BenchError as error:
        print(f"tls_cost: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
