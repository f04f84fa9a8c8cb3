"""Tier routing on real prompts: ``model: "auto"`` against sending everything to the biggest pool.

    python bench/tiers.py [--policy policies/examples/two-models.yaml] [--per-kind 3] [--max-tokens 48]

Starts ``sortyard run`` on the policy (the local engine serving every model it names, on a free
port), then streams a fixed, mixed set of real prompts (MT-Bench's questions, ``--per-kind`` of each of
its eight kinds, always the same ones) twice, one at a time: once with ``model: "auto"`` (the tier
classifier picks the pool; the gateway says which in ``x-sortyard-pool``) and once with
``model: <the biggest pool>``. Per pool it reports the share of prompts, median TTFT, median decode
speed and the cost per 1,000 requests under the policy's prices, and the totals of both runs.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway.keys.hashing import hash_key, new_key  # noqa: E402
from gateway.policy import load_policy  # noqa: E402
from loadtests.run import LocalGateway  # noqa: E402
from loadtests.sse import StreamMeter  # noqa: E402
from tools.tiers.sources import read_source  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


RUNS = ("auto", "largest")


@dataclass
class Sample:
    pool: str
    ttft_ms: float
    tokens_per_s: float | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


def prompts(per_kind: int) -> list[tuple[str, str]]:
    """(kind, text) for the first ``per_kind`` MT-Bench questions of each kind, in a fixed order."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for prompt in read_source("mt-bench"):
        if len(by_kind[prompt.kind]) < per_kind:
            by_kind[prompt.kind].append(prompt.text)
    return [(kind, text) for kind in sorted(by_kind) for text in by_kind[kind]]


def stream_one(
    client: httpx.Client, model: str, text: str, max_tokens: int, prices: dict[str, tuple[float, float]]
) -> Sample:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    meter = StreamMeter(started_s=started)
    prompt_tokens = 0
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{model}: HTTP {response.status_code}: {response.read()[:200]!r}")
        pool = response.headers.get("x-sortyard-pool", model)
        for line in response.iter_lines():
            meter.feed(line, time.perf_counter())
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
    if meter.problem() or meter.ttft_ms is None:
        raise RuntimeError(f"{model}: {meter.problem() or 'no content'}")
    price = prices.get(pool) or (0.0, 0.0)
    cost = prompt_tokens / 1000 * price[0] + meter.num_output_tokens / 1000 * price[1]
    return Sample(pool, meter.ttft_ms, meter.tokens_per_s, prompt_tokens, meter.num_output_tokens, cost)


def summarise(label: str, samples: list[Sample]) -> dict[str, object]:
    rows: dict[str, object] = {}
    by_pool: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_pool[s.pool].append(s)
    print(f"\n{label}: {len(samples)} requests")
    print(f"{'pool':<8} {'share':>6} {'TTFT p50 ms':>12} {'decode tok/s':>13} {'$ / 1k requests':>16}")
    for pool in sorted(by_pool):
        group = by_pool[pool]
        speeds = [s.tokens_per_s for s in group if s.tokens_per_s]
        row = {
            "share": len(group) / len(samples),
            "ttft_p50_ms": statistics.median(s.ttft_ms for s in group),
            "decode_tok_s": statistics.median(speeds) if speeds else None,
            "usd_per_1k_requests": 1000 * statistics.fmean(s.cost_usd for s in group),
        }
        rows[pool] = row
        speed = f"{row['decode_tok_s']:.1f}" if speeds else "-"
        print(
            f"{pool:<8} {row['share']:>6.0%} {row['ttft_p50_ms']:>12.0f} {speed:>13} "
            f"{row['usd_per_1k_requests']:>16.4f}"
        )
    total = {
        "ttft_p50_ms": statistics.median(s.ttft_ms for s in samples),
        "usd_per_1k_requests": 1000 * statistics.fmean(s.cost_usd for s in samples),
        "output_tokens": sum(s.completion_tokens for s in samples),
    }
    print(
        f"{'all':<8} {1:>6.0%} {total['ttft_p50_ms']:>12.0f} {'':>13} {total['usd_per_1k_requests']:>16.4f}"
    )
    rows["all"] = total
    return rows


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default=str(REPO / "policies" / "examples" / "two-models.yaml"))
    parser.add_argument("--per-kind", type=int, default=3, help="MT-Bench questions of each of 8 kinds")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--largest", default="large", help="the pool everything goes to in the baseline")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    policy = load_policy(args.policy, "no-overlay.yaml")
    prices = {
        name: (pool.price.input_per_1k, pool.price.output_per_1k) for name, pool in policy.pools.items()
    }
    work = prompts(args.per_kind)
    with tempfile.TemporaryDirectory(prefix="sortyard-tiers-") as tmp:
        # the policy's local engine moved to a free port, so a `make run` elsewhere is left alone
        engine_port = free_port()
        text = Path(args.policy).read_text().replace("127.0.0.1:8100", f"127.0.0.1:{engine_port}")
        document = yaml.safe_load(text)
        # one tenant per run: the engine's prefix cache is salted by tenant, so the second run never
        # reads KV the first one left behind
        run_keys = {label: new_key() for label in RUNS}
        keys = [{"sha256": hash_key(k), "tenant": f"tiers-{label}"} for label, k in run_keys.items()]
        document["keys"] = [*(document.get("keys") or []), *keys]
        policy_path = Path(tmp) / "policy.yaml"
        policy_path.write_text(yaml.safe_dump(document, sort_keys=False))
        gateway = LocalGateway(free_port(), str(policy_path), "sk-unused", Path(tmp) / "run.log")
        exports = gateway.start(timeout_s=600)
        try:
            base = exports["OPENAI_BASE_URL"].removesuffix("/v1")
            results = {}
            for label in RUNS:
                model = "auto" if label == "auto" else args.largest
                headers = {"Authorization": f"Bearer {run_keys[label]}"}
                with httpx.Client(base_url=base, headers=headers, timeout=300) as client:
                    stream_one(client, model, "Hello!", 4, prices)  # warm the path once
                    samples = [stream_one(client, model, text, args.max_tokens, prices) for _, text in work]
                results[label] = summarise(f'model: "{model}"', samples)
        finally:
            gateway.stop()
    auto, large = results["auto"]["all"], results["largest"]["all"]
    assert isinstance(auto, dict) and isinstance(large, dict)
    saving = (
        1 - auto["usd_per_1k_requests"] / large["usd_per_1k_requests"] if large["usd_per_1k_requests"] else 0
    )
    print(f"\nauto costs {saving:.0%} less than sending everything to {args.largest}")
    out = {"prompts": len(work), "max_tokens": args.max_tokens, "runs": results, "saving": saving}
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
