"""Time to first token with a 1,024-token shared prefix: cached against cold.

    python bench/prefix_ttft.py [--prefix-tokens 1024] [--trials 5] [--dtype float32]

Each trial builds a fresh random prefix; a cold request (prefix never seen) is timed, then a second
request with the same prefix and a different 16-token suffix is timed while the prefix blocks are cached.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams


def ttft_s(engine: LLMEngine, request_id: str, prompt: list[int]) -> tuple[float, int]:
    """Seconds until the request's first token, and how many prompt tokens came from the cache."""
    start = time.perf_counter()
    engine.add_request(request_id, prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    while True:
        for out in engine.step():
            if out.request_id == request_id and out.outputs[0].token_ids:
                elapsed = time.perf_counter() - start
                while engine.has_unfinished_requests():
                    engine.step()
                return elapsed, out.num_cached_tokens


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prefix-tokens", type=int, default=1024)
    parser.add_argument("--suffix-tokens", type=int, default=16)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    engine = LLMEngine(
        EngineConfig(model=args.model, dtype=args.dtype, kv_cache_bytes=512 << 20, num_threads=args.threads)
    )
    rng = random.Random(0)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(17, engine.model_config.vocab_size) for _ in range(n)]

    ttft_s(engine, "warmup", tokens(64))
    cold, warm, cached = [], [], []
    for trial in range(args.trials):
        prefix = tokens(args.prefix_tokens)
        t_cold, _ = ttft_s(engine, f"cold-{trial}", prefix + tokens(args.suffix_tokens))
        t_warm, num_cached = ttft_s(engine, f"warm-{trial}", prefix + tokens(args.suffix_tokens))
        cold.append(t_cold)
        warm.append(t_warm)
        cached.append(num_cached)
    result = {
        "prefix_tokens": args.prefix_tokens,
        "suffix_tokens": args.suffix_tokens,
        "dtype": args.dtype,
        "ttft_cold_p50_ms": round(1000 * statistics.median(cold), 1),
        "ttft_cached_p50_ms": round(1000 * statistics.median(warm), 1),
        "speedup": round(statistics.median(cold) / statistics.median(warm), 1),
        "cached_prompt_tokens": statistics.median(cached),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
