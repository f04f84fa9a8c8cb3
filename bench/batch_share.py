"""Interactive time to first token with and without a 1,000-request batch sharing the pool.

    python bench/batch_share.py [--lines 1000] [--clients 2] [--slots 4] [--reserve 2] [--seconds 5]
    python bench/batch_share.py --engine [--slots 4] [--reserve 2] [--max-tokens 16]

One gateway on loopback (uvicorn in a thread, the batch runner in its process) in front of the fake
upstream, whose ``slow-start`` model answers after ``--upstream-ms``; or, with ``--engine``, a gateway
process in front of ``make run``'s engine (the reference engine serving SmolLM2-135M-Instruct in a
process of its own, every answer ``--max-tokens`` long). The pool takes ``--slots`` requests at once
and queues the rest (``routing.pools.<pool>.queue``; ``--slots 0``: no queue, every request goes
straight to the engine, as in ``make run``'s default policy); batch lines leave ``--reserve`` of them
free for interactive streams (``queue.interactive_reserve``). Batch lines reach the engine at the
lowest priority class, which its scheduler admits last. Interactive clients stream chat completions
back to back. The bench runs the clients alone, the batch alone, both, then the clients alone again
(the two alone phases are the baseline), and reports the clients' TTFT p50 and p90 (to the first
token of text), its rise with the batch, and the batch's throughput (lines a second, from its
creation to ``completed``) each way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.keys.hashing import hash_key, new_key
from tools.servers.engine_process import EngineProcess
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_process import GatewayProcess
from tools.servers.gateway_server import GatewayServer, write_policy

KEY = new_key()
FINAL = ("completed", "failed", "expired", "cancelled")


def policy(replica: dict[str, Any], files_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    queue = {"max_wait_s": 60, "max_queued_per_tenant": 10_000, "interactive_reserve": args.reserve}
    pool_routing = {"max_outstanding_per_replica": args.slots, "queue": queue} if args.slots else {}
    return {
        "version": 1,
        "pools": {"work": {"replicas": [replica]}},
        "auth": {"required": True},
        "keys": [{"sha256": hash_key(KEY), "tenant": "acme", "name": "bench"}],
        "store": {"url_env": None},
        "timeouts": {"connect_s": 2, "first_byte_s": 60, "idle_s": 60, "total_s": 120},
        "routing": {"pools": {"work": pool_routing}},
        "telemetry": {"access_log": False},
        "batches": {
            "files_dir": str(files_dir),
            "concurrency": args.batch_concurrency,
        },
    }


def interactive(url: str, max_tokens: int, stop: threading.Event, ttfts: list[float]) -> None:
    """Stream chat completions back to back until ``stop``; each one's seconds to its first token."""
    body = {
        "model": "work",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say hello to the team."}],
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            start = time.perf_counter()
            with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
                first = None
                for line in response.iter_lines():
                    if first is None and has_text(line):
                        first = time.perf_counter() - start
                if response.status_code == 200 and first is not None:
                    ttfts.append(first)


def has_text(line: str) -> bool:
    """Whether an SSE line is a chunk with text in it (a server may send the role alone first)."""
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


def run_clients(url: str, num_clients: int, max_tokens: int, until: Any) -> list[float]:
    stop = threading.Event()
    ttfts: list[float] = []
    threads = [
        threading.Thread(target=interactive, args=(url, max_tokens, stop, ttfts)) for _ in range(num_clients)
    ]
    for thread in threads:
        thread.start()
    until()
    stop.set()
    for thread in threads:
        thread.join()
    return ttfts


def batch_file(n: int, max_tokens: int) -> bytes:
    lines = (
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "work",
                "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": f"Write a line about the number {i}."}],
            },
        }
        for i in range(n)
    )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def quantiles_ms(values: list[float]) -> dict[str, float | None]:
    """p50 and p90 in ms (None without a value; p90 is the largest value below two)."""
    if not values:
        return {"p50_ms": None, "p90_ms": None}
    p90 = statistics.quantiles(values, n=10)[8] if len(values) >= 2 else values[0]
    return {"p50_ms": round(statistics.median(values) * 1000, 1), "p90_ms": round(p90 * 1000, 1)}


def run_batch(api: httpx.Client, file_id: str, poll_s: float) -> dict[str, Any]:
    """Create a batch of ``file_id``, wait until it ends (asking every ``poll_s``); its status, counts
    and lines a second."""
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    start = time.perf_counter()
    batch_id = api.post("/v1/batches", json=body).json()["id"]
    while (batch := api.get(f"/v1/batches/{batch_id}").json())["status"] not in FINAL:
        time.sleep(poll_s)
    seconds = time.perf_counter() - start
    counts = batch["request_counts"]
    return {
        "status": batch["status"],
        "completed": counts["completed"],
        "failed": counts["failed"],
        "seconds": round(seconds, 2),
        "lines_per_s": round(counts["completed"] / seconds, 1),
    }


@contextlib.contextmanager
def upstream_for(args: argparse.Namespace, tmp: Path) -> Iterator[dict[str, Any]]:
    """The pool's one replica, running: the fake upstream, or make run's engine with ``--engine``."""
    if args.engine:
        engine = EngineProcess(
            "smollm2-135m",
            name="smollm2-135m",
            log_path=tmp / "engine.log",
            num_threads=args.engine_threads,
            kv_events=False,
            extra_args=tuple(args.engine_args.split()),
        )
        try:
            engine.start().wait_ready()
            yield {"base_url": engine.url + "/v1", "model": "smollm2-135m", "kind": "sortyard"}
        finally:
            engine.stop()
        return
    upstream = FakeUpstream().start()
    upstream.slow_start_s = args.upstream_ms / 1000
    try:
        yield {"base_url": upstream.base_url, "model": "slow-start"}
    finally:
        upstream.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2, help="interactive clients, each back to back")
    parser.add_argument("--slots", type=int, default=4, help="requests the pool takes at once")
    parser.add_argument(
        "--reserve", type=int, default=2, help="slots batch lines leave to interactive requests"
    )
    parser.add_argument("--batch-concurrency", type=int, default=8, help="batch lines in flight")
    parser.add_argument("--upstream-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="the interactive-only phase")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="clients before the first phase")
    parser.add_argument("--engine", action="store_true", help="make run's engine, not the fake upstream")
    parser.add_argument("--engine-threads", type=int, default=2, help="the engine's torch threads")
    parser.add_argument("--engine-args", default="", help="more options for the engine's command line")
    parser.add_argument("--max-tokens", type=int, default=16, help="every answer's length")
    parser.add_argument(
        "--poll-s", type=float, default=0.25, help="how often the bench asks whether the batch is over"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp, upstream_for(args, Path(tmp)) as replica:
        path = write_policy(Path(tmp) / "policy.yaml", policy(replica, Path(tmp) / "files", args))
        # create_app serves the batch routes and runs the runner; beside the engine, the gateway is a
        # process of its own, as in make run, so these clients do not share its interpreter
        server = GatewayProcess(path).wait_ready() if args.engine else GatewayServer(path).start()
        try:
            run_clients(server.url, args.clients, args.max_tokens, lambda: time.sleep(args.warmup_s))
            alone = run_clients(server.url, args.clients, args.max_tokens, lambda: time.sleep(args.seconds))
            headers = {"Authorization": f"Bearer {KEY}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as api:
                files = {"file": ("batch.jsonl", batch_file(args.lines, args.max_tokens))}
                file_id = api.post("/v1/files", files=files, data={"purpose": "batch"}).json()["id"]
                batch_alone = run_batch(api, file_id, args.poll_s)
                made: dict[str, Any] = {}
                shared = run_clients(
                    server.url,
                    args.clients,
                    args.max_tokens,
                    lambda: made.update(run_batch(api, file_id, args.poll_s)),
                )
            # the clients alone once more: the baseline is both phases, so a machine that drifts
            # during the run does not read as the batch's cost
            alone += run_clients(server.url, args.clients, args.max_tokens, lambda: time.sleep(args.seconds))
        finally:
            server.stop()
    alone_p50, shared_p50 = quantiles_ms(alone)["p50_ms"], quantiles_ms(shared)["p50_ms"]
    result = {
        "interactive_alone": {"requests": len(alone), **quantiles_ms(alone)},
        "interactive_with_batch": {"requests": len(shared), **quantiles_ms(shared)},
        "ttft_p50_rise": round(shared_p50 / alone_p50 - 1, 3) if alone_p50 and shared_p50 else None,
        "batch_alone": batch_alone,
        "batch_with_interactive": made,
        "args": vars(args),
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
