"""KV-cache-aware picks against round robin and prefix-affinity hashing, on a multi-turn chat workload.

16 conversations of 4-6 turns (fixed seed) go through one gateway to 4 reference-engine replicas
(SmolLM2-135M by default, one torch thread each). Each conversation opens with one of 4 shared system
prompts (~250 tokens) and a document of its own (~400 tokens), and every turn resends the whole
history with the model's earlier replies. Conversations run 4 at a time, each turn after the
previous one's answer.

The same workload runs once per mode, each on freshly started engines (empty prefix caches) and a new
gateway whose policy differs only in how a replica is picked:

- ``round_robin``: no affinity, no KV events (the balancer's ``round_robin``);
- ``affinity``: prompt-prefix affinity hashing (``cache.affinity``, the default), no KV events;
- ``kv``: KV-cache-aware picks (``kv_routing``) from the engines' own KV events.

With ``--gateways 2`` each conversation's turns alternate between two gateway processes, as behind
a load balancer. Without ``--redis-url`` each has its own in-memory store: prefix affinity only knows
the picks its own process made, while every gateway hears every engine's KV events. With
``--redis-url`` they share one Redis, and with it prefix affinity's map, as a production fleet does.

``affinity`` and ``kv`` balance ``load_aware`` on the engines' ``/metrics`` (``--scrape-s``, 0.25 s).

Reported per mode: TTFT p50/p90 (first streamed chunk, ``max_tokens`` 16), the engines' prefix-cache
hit rate (``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``, in tokens, summed over the
replicas), requests per replica and the busiest replica's load over the mean. The ``kv`` mode also
gives a floor: the TTFT p50 of the later turns that had their replica to themselves until their
first token (their route reason names it, and no other request overlapped there), about the least any
pick could give a turn; affinity's p50 over it is about the most a pick could gain at the median.
``--long-prefill-tokens N`` starts the engines with ``--long-prefill-token-threshold N``.

    python bench/kv_routing.py                        # ~5-8 min on 2 cores
    python bench/kv_routing.py --modes affinity kv --gateways 2 --redis-url redis://127.0.0.1:6379
    python bench/kv_routing.py --modes affinity kv --rounds 3 --json-out kv.json  # medians of 3 runs

On a 2-core machine the 4 engines (plus the gateway and this client) share 2 cores: TTFT includes
waiting for a core, which grows with every cold prefill any replica runs, and a replica left idle
lends its core to the busy ones, so spreading load buys no TTFT by itself. ``--engine-cpus 0.45``
gives each engine a fixed CPU quota instead (a cgroup, ``tools/servers/cpu_quota.py``; needs root),
as each replica has its own GPU in production: a replica carrying two conversations then runs them on
the same share as one carrying none, and where a router piles conversations shows in TTFT:

    python bench/kv_routing.py --modes round_robin affinity kv --turns 10 14 --systems 1 --gateways 2 \
        --redis-url redis://127.0.0.1:6379 --engine-cpus 0.45 --kv-cache-mib 96 --stagger-s 2

Compare the modes within one run; the absolute figures do not transfer. The workload and its client
are in ``bench/kv_chat.py``; ``--log-dir`` keeps every request's TTFT, route reason and cached tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.processes import tree_cpu_s  # noqa: E402
from kv_chat import Conversation, Turn, alone, converse, workload  # noqa: E402

from tools.servers.cpu_quota import CpuQuota, cpu_quota_root  # noqa: E402
from tools.servers.engine_process import EngineProcess  # noqa: E402
from tools.servers.gateway_process import GatewayProcess  # noqa: E402

MODES = ("ceiling", "round_robin", "affinity", "kv")
CEILING_KV_CACHE_MIB = 1024
"""The ceiling's one engine: room for every conversation of the workload, so nothing is evicted."""
POOL = "chat"


def policy(
    mode: str, engines: dict[str, EngineProcess], tokenizer: Path, scrape_s: float, shared: bool
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "version": 1,
        "pools": {
            POOL: {
                "replicas": [
                    {"base_url": f"{e.url}/v1", "model": "smollm2", "name": label, "send_cache_salt": True}
                    for label, e in engines.items()
                ]
            }
        },
        # a tenant of its own per run and mode: affinity keys in a shared Redis never meet another's
        "auth": {"required": False, "anonymous_tenant": f"kv-bench-{mode}-{os.getpid()}"},
        "store": {"url_env": "SORTYARD_REDIS_URL" if shared else None},
        "timeouts": {"connect_s": 5, "first_byte_s": 300, "idle_s": 120, "total_s": 600},
        "retry": {"max_attempts": 1},
        "cache": {"response": {"enabled": False}, "affinity": {"enabled": mode != "round_robin"}},
        "routing": {"health": {"probe_interval_s": 0}, "pools": {POOL: {}}},
        "telemetry": {"access_log": False},
    }
    if mode == "round_robin":
        document["routing"]["pools"][POOL]["strategy"] = "round_robin"
    elif scrape_s:  # every gateway sees what the engines run, whichever gateway sent it
        document["routing"]["pools"][POOL]["strategy"] = "load_aware"
        document["routing"]["pools"][POOL]["health"] = {"probe_interval_s": 0, "scrape_interval_s": scrape_s}
    if mode == "kv":
        document["kv_routing"] = {
            "pools": {
                POOL: {
                    "tokenizer": str(tokenizer),
                    "replicas": {label: e.kv_source for label, e in engines.items()},
                }
            }
        }
    return document


def run_mode(
    mode: str, args: argparse.Namespace, work: tuple[list[str], list[tuple[int, Conversation]]], tmp: Path
) -> dict[str, Any]:
    # the ceiling is what a cache that never evicts reaches, whatever cache the replicas get
    kv_cache_mib = max(args.kv_cache_mib, CEILING_KV_CACHE_MIB) if mode == "ceiling" else args.kv_cache_mib
    engine_args = (
        "--max-model-len",
        "4096",
        "--kv-cache-bytes",
        str(kv_cache_mib << 20),
        "--max-num-seqs",
        "8",
        "--long-prefill-token-threshold",
        str(args.long_prefill_tokens),
    )
    tokenizer = tmp / f"tokenizer-{mode}"
    engines = {
        f"r{i}": EngineProcess(
            args.model,
            name="smollm2",
            log_path=tmp / f"{mode}-r{i}.log",
            tokenizer_dir=tokenizer if i == 0 else None,
            extra_args=engine_args,
        )
        for i in range(1 if mode == "ceiling" else args.replicas)
    }
    gateways: list[GatewayProcess] = []
    quotas: list[CpuQuota] = []
    try:
        for engine in engines.values():
            engine.start()
        for label, engine in engines.items():
            engine.wait_ready()
            if args.engine_cpus:  # from now on it runs on its own share, as on a GPU of its own
                assert engine.proc is not None
                quotas.append(CpuQuota(f"sortyard-kv-bench-{os.getpid()}-{mode}-{label}", args.engine_cpus))
                quotas[-1].add(engine.proc.pid)
        path = tmp / f"policy-{mode}.yaml"
        document = policy(mode, engines, tokenizer, args.scrape_s, bool(args.redis_url))
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        env = {"SORTYARD_CACHE_SALT_SECRET": "bench"}
        if args.redis_url:  # one store for the fleet: prefix affinity shares its map
            env["SORTYARD_REDIS_URL"] = args.redis_url
        for _ in range(args.gateways):  # else each its own in-memory store, as a fleet without Redis
            gateways.append(GatewayProcess(path, env=env))
        urls = [gateway.wait_ready().url for gateway in gateways]
        before = {label: e.metrics() for label, e in engines.items()}
        cpu_before = cpu_seconds(gateways, engines)
        systems, conversations = work
        started = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            runs = pool.map(
                lambda c: converse(
                    urls,
                    POOL,
                    systems[c[1][0]],
                    c[1][1],
                    args.max_tokens,
                    c[0],
                    first_start(c[0], args),
                    started,
                ),
                enumerate(conversations),
            )
            turns: list[Turn] = [turn for run in runs for turn in run]
        wall_s = time.perf_counter() - started
        cpu_after = cpu_seconds(gateways, engines)
        with open(tmp / f"{mode}-turns.jsonl", "w") as out:  # each request: why it was slow or fast
            out.writelines(json.dumps(dataclasses.asdict(turn)) + "\n" for turn in turns)
        ttfts = sorted(turn.ttft_s for turn in turns)
        after = {label: e.metrics() for label, e in engines.items()}
        decisions = kv_decisions(urls) if mode == "kv" else {}
    finally:
        for gateway in gateways:
            gateway.stop()
        for engine in engines.values():
            engine.stop()
        for quota in quotas:
            quota.close()

    def delta(name: str) -> dict[str, float]:
        return {label: after[label].get(name, 0.0) - before[label].get(name, 0.0) for label in engines}

    hits, queries = (
        sum(delta("vllm:prefix_cache_hits").values()),
        sum(delta("vllm:prefix_cache_queries").values()),
    )
    served = delta("vllm:request_success")
    mean = sum(served.values()) / len(served)
    return {
        "mode": mode if args.gateways == 1 else f"{mode} ({args.gateways} gateways)",
        "requests": len(ttfts),
        "wall_s": round(wall_s, 1),
        "ttft_p50_ms": round(1000 * statistics.median(ttfts)),
        "ttft_p90_ms": round(1000 * ttfts[int(0.9 * (len(ttfts) - 1))]),
        "prefix_hit_rate": round(hits / queries, 3) if queries else 0.0,
        "per_replica": [int(served[label]) for label in engines],
        "max_over_mean": round(max(served.values()) / mean, 2) if mean else 0.0,
        "kv_decisions": decisions,
        "gateway_cpu_ms_per_request": round(1000 * (cpu_after[0] - cpu_before[0]) / len(ttfts), 2),
        "engine_cpu_ms_per_request": round(1000 * (cpu_after[1] - cpu_before[1]) / len(ttfts), 1),
        **alone(turns),
    }


def cpu_seconds(gateways: list[GatewayProcess], engines: dict[str, EngineProcess]) -> tuple[float, float]:
    """CPU seconds used so far by the gateways, and by the engines (each with its children)."""
    engine_pids = [e.proc.pid for e in engines.values() if e.proc is not None]
    return sum(tree_cpu_s(g.proc.pid) for g in gateways), sum(map(tree_cpu_s, engine_pids))


def first_start(number: int, args: argparse.Namespace) -> float:
    """When conversation ``number`` starts, from the run's start: the first ``concurrency`` ones
    ``stagger_s`` apart (users arrive one by one), each later one as soon as one ends."""
    return number * args.stagger_s if number < args.concurrency else 0.0


def kv_decisions(urls: list[str]) -> dict[str, int]:
    """The gateways' ``sortyard_kv_route_decisions_total`` by outcome."""
    out: dict[str, int] = {}
    lines = [line for url in urls for line in httpx.get(url + "/metrics", timeout=5).text.splitlines()]
    for line in lines:
        if line.startswith("sortyard_kv_route_decisions_total{"):
            outcome = line.partition('outcome="')[2].partition('"')[0]
            out[outcome] = out.get(outcome, 0) + int(float(line.rpartition(" ")[2]))
    return out


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | requests | TTFT p50 ms | TTFT p90 ms | engines' prefix hit rate | per replica | max/mean "
        "| CPU ms a request: gateways, engines |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['mode']} | {r['requests']} | {r['ttft_p50_ms']} | {r['ttft_p90_ms']} | "
            f"{100 * r['prefix_hit_rate']:.1f}% | {r['per_replica']} | {r['max_over_mean']} | "
            f"{r.get('gateway_cpu_ms_per_request', '-')}, {r.get('engine_cpu_ms_per_request', '-')} |"
        )
    by_mode = {r["mode"].partition(" ")[0]: r for r in results}
    if {"affinity", "kv"} <= by_mode.keys():
        aff, kv = by_mode["affinity"], by_mode["kv"]
        speedup = aff["ttft_p50_ms"] / kv["ttft_p50_ms"] if kv["ttft_p50_ms"] else 0.0
        lines.append(
            f"\nKV-aware TTFT p50 {speedup:.2f}x lower than affinity hashing (target >= 1.5x); "
            f"prefix hits {100 * kv['prefix_hit_rate']:.1f}% (target >= 90%); max/mean load "
            f"{kv['max_over_mean']} (target <= 1.5); KV decisions {kv['kv_decisions']}"
        )
        if kv.get("alone_turns"):
            floor = kv["alone_ttft_p50_ms"]
            lines.append(
                f"Floor: {kv['alone_turns']} later turns had their replica to themselves (kv mode): TTFT "
                f"p50 {floor} ms; affinity's p50 is {aff['ttft_p50_ms'] / floor:.2f}x that, the most a pick "
                "could gain at the median"
            )
    if "ceiling" in by_mode and by_mode["ceiling"]["prefix_hit_rate"]:
        top = by_mode["ceiling"]["prefix_hit_rate"]
        reached = ", ".join(
            f"{m} {r['prefix_hit_rate'] / top:.1%}" for m, r in by_mode.items() if m != "ceiling"
        )
        lines.append(f"Hit-rate ceiling {100 * top:.1f}% (one engine holding it all); reached: {reached}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m", help="what each engine's --model serves")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument(
        "--turns", type=int, nargs=2, default=(4, 6), metavar=("MIN", "MAX"), help="turns per conversation"
    )
    parser.add_argument("--systems", type=int, default=4, help="shared system prompts")
    parser.add_argument("--system-words", type=int, default=220)
    parser.add_argument("--document-words", type=int, default=360)
    parser.add_argument("--gateways", type=int, default=1, help="gateway processes, turns spread over them")
    parser.add_argument(
        "--scrape-s",
        type=float,
        default=0.25,
        help="affinity and kv: balance load_aware on the engines' /metrics scraped this often (0: "
        "least_outstanding, each gateway counting only its own requests)",
    )
    parser.add_argument(
        "--redis-url", help="the gateways share this Redis (prefix affinity's map among them)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="conversations at a time")
    parser.add_argument(
        "--stagger-s",
        type=float,
        default=0.0,
        help="start the first --concurrency conversations this far apart, as users arrive (0: all at "
        "once, when no gateway has recorded a pick yet and the balancers seed several replicas)",
    )
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--kv-cache-mib", type=int, default=1024, help="each engine's KV cache")
    parser.add_argument(
        "--long-prefill-tokens",
        type=int,
        default=0,
        help="each engine's --long-prefill-token-threshold: a long prompt prefills in chunks this size, "
        "beside the other conversations' turns (0: in one step)",
    )
    parser.add_argument(
        "--engine-cpus",
        type=float,
        help="give each engine a CPU quota of this many cores (a cgroup; needs root), so that one "
        "replica's idle time is not lent to another, as with one GPU a replica",
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of every mode; medians are reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out")
    parser.add_argument(
        "--log-dir",
        help="keep the engines' logs, the policies and each mode's turns (<mode>-turns.jsonl: TTFT, "
        "route reason, cached tokens of every request) here (default: a temp dir)",
    )
    args = parser.parse_args()
    if args.engine_cpus and cpu_quota_root() is None:
        parser.error("--engine-cpus needs a writable cgroup CPU controller (root, or a delegated subtree)")
    work = workload(args)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sy-kv-routing-") as tmp:
        logs = Path(args.log_dir or tmp)
        for number in range(args.rounds):  # the modes take turns, so a slow spell hits each alike
            (logs / f"{number}").mkdir(parents=True, exist_ok=True)
            for mode in args.modes:
                print(f"round {number + 1}: running {mode} ...", file=sys.stderr, flush=True)
                rounds.append(run_mode(mode, args, work, logs / f"{number}"))
                print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    results = [
        median_of([r for r in rounds if r["mode"] == mode])
        for mode in dict.fromkeys(r["mode"] for r in rounds)
    ]
    print(report(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"results": results, "rounds": rounds}, indent=2))
    return 0


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode over its rounds: the median of each figure, the load spread of the median round.

    Which replica a conversation lands on first differs from round to round (the balancer's ties
    start at a random replica in each gateway process), and with it the load spread: one round says
    little, the median of a few says more."""
    if len(runs) == 1:
        return runs[0]
    middle = sorted(runs, key=lambda r: r["max_over_mean"])[len(runs) // 2]
    return {
        **middle,
        **{
            name: statistics.median(r[name] for r in runs)
            for name in ("wall_s", "ttft_p50_ms", "ttft_p90_ms", "prefix_hit_rate", "max_over_mean")
        },
        "rounds": len(runs),
    }


if __name__ == "__main__":
    sys.exit(main())
