"""Short prompts' time to first token while long prompts prefill, with and without the long-prefill cap.

    python bench/long_prefill.py [--caps 0 64 128 256] [--seconds 40] [--threads 1]

One reference engine in this process (SmolLM2-135M-Instruct, float32, ``--threads`` torch threads)
serves two streams of requests, on a fixed schedule of arrivals so every cap sees the same work:

- **short** turns every ``--short-every-s``: a ``--prefix-tokens`` prefix they all share (a chat's
  history, cached after the first) and ``--short-tokens`` new ones, as a chat's next turn;
- **long** prompts every ``--long-every-s``: ``--long-tokens`` tokens never seen before, as a
  conversation's first turn with a document.

Each request generates ``--max-tokens``. For every ``--long-prefill-token-threshold`` in ``--caps``
(0: no cap, a prompt takes as much of a step's budget as it needs) the engine starts empty and the same
schedule runs for ``--seconds``; reported: the short and long requests' TTFT (arrival to first token)
p50 / p90 / max, and the tokens generated a second over the run. A run keeps stepping past the
schedule until every request has finished.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams


def schedule(args: argparse.Namespace) -> list[tuple[float, str, list[int]]]:
    """(arrival s, request id, prompt token ids), in arrival order."""
    rng = random.Random(args.seed)
    prefix = [rng.randrange(1000, 40000) for _ in range(args.prefix_tokens)]
    arrivals: list[tuple[float, str, list[int]]] = []
    for i in range(int(args.seconds / args.short_every_s)):
        suffix = [rng.randrange(1000, 40000) for _ in range(args.short_tokens)]
        arrivals.append((i * args.short_every_s, f"short-{i}", prefix + suffix))
    for i in range(int(args.seconds / args.long_every_s)):
        prompt = [rng.randrange(1000, 40000) for _ in range(args.long_tokens)]
        arrivals.append((args.long_offset_s + i * args.long_every_s, f"long-{i}", prompt))
    return sorted(arrivals)


def run(engine: LLMEngine, arrivals: list[tuple[float, str, list[int]]], max_tokens: int) -> dict[str, Any]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    arrived: dict[str, float] = {}
    ttft: dict[str, float] = {}
    generated = 0
    pending = list(arrivals)
    start = time.perf_counter()
    while pending or engine.has_unfinished_requests():
        now = time.perf_counter() - start
        while pending and pending[0][0] <= now:
            at, request_id, prompt = pending.pop(0)
            engine.add_request(request_id, prompt, params)
            arrived[request_id] = start + at
        if not engine.has_unfinished_requests():
            time.sleep(max(0.0, pending[0][0] - now))
            continue
        for out in engine.step():
            if out.outputs[0].token_ids and out.request_id not in ttft:
                ttft[out.request_id] = time.perf_counter() - arrived[out.request_id]
            if out.finished:
                generated += len(out.outputs[0].token_ids)
    wall_s = time.perf_counter() - start
    result: dict[str, Any] = {"wall_s": round(wall_s, 1), "generated_tok_s": round(generated / wall_s, 1)}
    for kind in ("short", "long"):
        values = sorted(v for k, v in ttft.items() if k.startswith(kind))
        result[kind] = {
            "n": len(values),
            "ttft_p50_ms": round(statistics.median(values) * 1000),
            "ttft_p90_ms": round(values[int(0.9 * (len(values) - 1))] * 1000),
            "ttft_max_ms": round(values[-1] * 1000),
        }
    return result


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--caps", type=int, nargs="+", default=[0, 64, 128, 256])
    parser.add_argument("--seconds", type=float, default=36.0)
    parser.add_argument("--short-every-s", type=float, default=0.5)
    parser.add_argument("--short-tokens", type=int, default=32)
    parser.add_argument("--prefix-tokens", type=int, default=512)
    parser.add_argument("--long-every-s", type=float, default=5.0)
    parser.add_argument("--long-offset-s", type=float, default=1.0)
    parser.add_argument("--long-tokens", type=int, default=1024)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    arrivals = schedule(args)
    results = []
    for cap in args.caps:
        engine = LLMEngine(
            EngineConfig(
                model=args.model,
                kv_cache_bytes=512 << 20,
                max_num_seqs=16,
                num_threads=args.threads,
                long_prefill_token_threshold=cap,
            )
        )
        engine.generate([arrivals[0][2]], SamplingParams(max_tokens=1))  # warm up (and cache the prefix)
        result = {"cap": cap, **run(engine, arrivals, args.max_tokens)}
        print(json.dumps(result), flush=True)
        results.append(result)
        del engine
    print("\n| cap | short TTFT p50 / p90 / max ms | long TTFT p50 / p90 / max ms | generated tok/s |")
    print("|---:|---|---|---:|")
    for r in results:
        s, g = r["short"], r["long"]
        print(
            f"| {r['cap'] or 'none'} | {s['ttft_p50_ms']} / {s['ttft_p90_ms']} / {s['ttft_max_ms']} "
            f"| {g['ttft_p50_ms']} / {g['ttft_p90_ms']} / {g['ttft_max_ms']} | {r['generated_tok_s']} |"
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
