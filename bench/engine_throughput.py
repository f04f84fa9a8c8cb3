"""Throughput of the reference engine on a fixed offline workload, optionally against HF transformers.

    python bench/engine_throughput.py                        # the engine, 64 requests, fp32
    python bench/engine_throughput.py --baseline hf-static8  # HF generate in static padded batches of 8
    python bench/engine_throughput.py --baseline hf-single   # HF generate one request at a time
    python bench/engine_throughput.py --num-requests 8 --dtype bfloat16
    python bench/engine_throughput.py --batch-1 --quantization int8  # 8 requests one at a time, int8
    python bench/engine_throughput.py --model gemma3-270m [--baseline hf-static8]

Workload: prompt lengths uniform in [32, 512], output lengths uniform in [16, 256] (seed 0), random
non-special token ids of the model's vocabulary (the same lengths for every model), all submitted at
once, ignore_eos so every length is exact.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import GEMMA3_NAME, SMOLLM2_NAME, gemma3_gguf_path, smollm2_gguf_path
from backends.engine.sampling_params import SamplingParams

NUM_SPECIAL_TOKENS = 17  # SmolLM2's control tokens come first in its vocab
VOCAB = {SMOLLM2_NAME: (NUM_SPECIAL_TOKENS, 49152), GEMMA3_NAME: (256, 262144)}
"""(first ordinary token id, vocabulary size): Gemma 3 keeps its control and unused tokens below 256."""
GGUF_PATHS = {SMOLLM2_NAME: smollm2_gguf_path, GEMMA3_NAME: gemma3_gguf_path}


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @classmethod
    def build(
        cls, num_requests: int, seed: int, vocab: tuple[int, int] = (NUM_SPECIAL_TOKENS, 49152)
    ) -> Workload:
        """The same lengths for every model: ids are drawn in SmolLM2's range, then spread over
        ``vocab`` (first ordinary id, size) by a fixed multiplicative hash when it differs."""
        rng = random.Random(seed)
        prompts, outs = [], []
        for _ in range(num_requests):
            prompts.append([rng.randrange(NUM_SPECIAL_TOKENS, 49152) for _ in range(rng.randint(32, 512))])
            outs.append(rng.randint(16, 256))
        first, size = vocab
        if vocab != (NUM_SPECIAL_TOKENS, 49152):
            prompts = [[first + (t * 2654435761) % (size - first) for t in p] for p in prompts]
        return cls(prompts, outs)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_engine(args: argparse.Namespace, work: Workload) -> dict[str, object]:
    engine = LLMEngine(
        EngineConfig(
            model=args.model,
            dtype=args.dtype,
            quantization=args.quantization,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            kv_cache_bytes=args.kv_cache_mib << 20,
            num_threads=args.threads,
        )
    )
    bs = engine.block_manager.block_size
    start = time.perf_counter()
    for i, (prompt, out_len) in enumerate(zip(work.prompts, work.output_lens, strict=True)):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0, max_tokens=out_len, ignore_eos=True))
    first: dict[str, float] = {}
    done: dict[str, float] = {}
    peak_blocks, waste_at_peak, num_steps = 0, 0.0, 0
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter() - start
        num_steps += 1
        for out in outputs:
            first.setdefault(out.request_id, now)
            if out.finished:
                done[out.request_id] = now
        filled: dict[int, int] = {}
        for seq in engine.scheduler.running:
            for i, block_id in enumerate(seq.block_table):
                if block_id < 0:  # freed: a sliding window passed it
                    continue
                used = min(bs, max(0, seq.num_computed_tokens - i * bs))
                filled[block_id] = max(filled.get(block_id, 0), used)
        if len(filled) > peak_blocks:
            peak_blocks = len(filled)
            waste_at_peak = 1 - sum(filled.values()) / (len(filled) * bs)
    wall_s = time.perf_counter() - start
    num_out = sum(work.output_lens)
    tpot = [
        (done[r] - first[r]) / (n - 1)
        for r, n in zip(map(str, range(len(work.prompts))), work.output_lens, strict=True)
        if n > 1
    ]
    ttft = list(first.values())
    weight_bytes = engine.runner.weight_bytes
    quant = f", {args.quantization}" if args.quantization else ""
    return {
        "system": f"engine {args.model} ({args.dtype}{quant})",
        "max_num_seqs": args.max_num_seqs,
        "num_requests": len(work.prompts),
        "prompt_tokens": sum(map(len, work.prompts)),
        "output_tokens": num_out,
        "wall_s": round(wall_s, 1),
        "output_tok_s": round(num_out / wall_s, 1),
        "total_tok_s": round((num_out + sum(map(len, work.prompts))) / wall_s, 1),
        "ttft_p50_s": round(percentile(ttft, 0.5), 2),
        "ttft_p99_s": round(percentile(ttft, 0.99), 2),
        "tpot_p50_ms": round(1000 * statistics.median(tpot), 1),
        "decode_tok_s_p50": round(1 / statistics.median(tpot), 1),
        "gemm_weight_int8_mb": None if weight_bytes is None else round(weight_bytes.int8_bytes / 1e6, 1),
        "gemm_weight_float_mb": None if weight_bytes is None else round(weight_bytes.float_bytes / 1e6, 1),
        "steps": num_steps,
        "peak_kv_blocks": peak_blocks,
        "kv_waste_at_peak": round(waste_at_peak, 4),
        "num_preemptions": engine.stats().num_preemptions,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "threads": torch.get_num_threads(),
    }


def run_hf(args: argparse.Namespace, work: Workload) -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    path = GGUF_PATHS[args.model]()
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).eval()
    batch_size = 8 if args.baseline == "hf-static8" else 1
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 2
    start = time.perf_counter()
    ttft: list[float] = []
    for b in range(0, len(work.prompts), batch_size):
        prompts, lens = work.prompts[b : b + batch_size], work.output_lens[b : b + batch_size]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        num_new = max(lens)  # a static batch runs until its longest member is done
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=num_new,
                min_new_tokens=num_new,
                do_sample=False,
                pad_token_id=pad_id,
            )
        ttft.extend([time.perf_counter() - start] * len(prompts))  # upper bound: the batch's end
    wall_s = time.perf_counter() - start
    num_out = sum(work.output_lens)
    return {
        "system": f"{args.baseline} {args.model} ({args.dtype})",
        "num_requests": len(work.prompts),
        "output_tokens": num_out,
        "wall_s": round(wall_s, 1),
        "output_tok_s": round(num_out / wall_s, 1),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=SMOLLM2_NAME, choices=sorted(VOCAB))
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--quantization", choices=["int8"], default=None)
    parser.add_argument(
        "--batch-1",
        action="store_true",
        help="one sequence at a time (max_num_seqs 1) over 8 requests: single-stream decode speed",
    )
    parser.add_argument("--baseline", choices=["hf-static8", "hf-single"], default=None)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--kv-cache-mib", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.batch_1:
        args.max_num_seqs = 1
        args.num_requests = min(args.num_requests, 8)
    work = Workload.build(args.num_requests, args.seed, VOCAB[args.model])
    result = run_hf(args, work) if args.baseline else run_engine(args, work)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
