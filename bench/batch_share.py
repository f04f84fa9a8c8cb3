"""Interactive time to first token with and without a 1,000-request batch sharing the pool.

    python bench/batch_share.py [--lines 1000] [--clients 2] [--slots 4] [--reserve 2] [--seconds 5]

One gateway on loopback (uvicorn in a thread, the batch runner in its process) in front of the fake
upstream, whose ``slow-start`` model answers after ``--upstream-ms``. The pool takes ``--slots``
requests at once and queues the rest (``routing.pools.<pool>.queue``); batch lines leave ``--reserve``
of them free for interactive streams (``queue.interactive_reserve``). Interactive clients stream chat
completions back to back. The bench runs the batch alone, then the clients alone, then both, and
reports the clients' TTFT p50 and p90 and the batch's throughput (lines a second, from its creation
to ``completed``) each way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, write_policy

KEY = new_key()
FINAL = ("completed", "failed", "expired", "cancelled")


def policy(upstream: FakeUpstream, files_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "version": 1,
        "pools": {"work": {"replicas": [{"base_url": upstream.base_url, "model": "slow-start"}]}},
        "auth": {"required": True},
        "keys": [{"sha256": hash_key(KEY), "tenant": "acme", "name": "bench"}],
        "store": {"url_env": None},
        "timeouts": {"connect_s": 2, "first_byte_s": 60, "idle_s": 60, "total_s": 120},
        "routing": {
            "pools": {
                "work": {
                    "max_outstanding_per_replica": args.slots,
                    "queue": {
                        "max_wait_s": 60,
                        "max_queued_per_tenant": 10_000,
                        "interactive_reserve": args.reserve,
                    },
                }
            }
        },
        "telemetry": {"access_log": False},
        "batches": {
            "files_dir": str(files_dir),
            "concurrency": args.batch_concurrency,
            "poll_interval_s": 0.05,
        },
    }


def interactive(url: str, stop: threading.Event, ttfts: list[float]) -> None:
    """Stream chat completions back to back until ``stop``; each one's seconds to its first event."""
    body = {"model": "work", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            start = time.perf_counter()
            with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
                first = None
                for chunk in response.iter_bytes():
                    if first is None and chunk:
                        first = time.perf_counter() - start
                if response.status_code == 200 and first is not None:
                    ttfts.append(first)


def run_clients(url: str, num_clients: int, until: Any) -> list[float]:
    stop = threading.Event()
    ttfts: list[float] = []
    threads = [threading.Thread(target=interactive, args=(url, stop, ttfts)) for _ in range(num_clients)]
    for thread in threads:
        thread.start()
    until()
    stop.set()
    for thread in threads:
        thread.join()
    return ttfts


def batch_file(n: int) -> bytes:
    lines = (
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "work", "messages": [{"role": "user", "content": f"batch prompt {i}"}]},
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


def run_batch(api: httpx.Client, file_id: str) -> dict[str, Any]:
    """Create a batch of ``file_id``, wait until it ends; its status, counts and lines a second."""
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    start = time.perf_counter()
    batch_id = api.post("/v1/batches", json=body).json()["id"]
    while (batch := api.get(f"/v1/batches/{batch_id}").json())["status"] not in FINAL:
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    counts = batch["request_counts"]
    return {
        "status": batch["status"],
        "completed": counts["completed"],
        "failed": counts["failed"],
        "seconds": round(seconds, 2),
        "lines_per_s": round(counts["completed"] / seconds, 1),
    }


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
    args = parser.parse_args(argv)

    upstream = FakeUpstream().start()
    upstream.slow_start_s = args.upstream_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        path = write_policy(Path(tmp) / "policy.yaml", policy(upstream, Path(tmp) / "files", args))
        server = GatewayServer(path).start()  # create_app serves the batch routes and runs the runner
        try:
            alone = run_clients(server.url, args.clients, lambda: time.sleep(args.seconds))
            headers = {"Authorization": f"Bearer {KEY}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as api:
                files = {"file": ("batch.jsonl", batch_file(args.lines))}
                file_id = api.post("/v1/files", files=files, data={"purpose": "batch"}).json()["id"]
                batch_alone = run_batch(api, file_id)
                made: dict[str, Any] = {}
                shared = run_clients(server.url, args.clients, lambda: made.update(run_batch(api, file_id)))
        finally:
            server.stop()
            upstream.stop()
    result = {
        "interactive_alone": {"requests": len(alone), **quantiles_ms(alone)},
        "interactive_with_batch": {"requests": len(shared), **quantiles_ms(shared)},
        "batch_alone": batch_alone,
        "batch_with_interactive": made,
        "args": vars(args),
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
