"""Pipeline parallelism with and without micro-batches in flight, against one process, in process.

    python bench/pipeline_parallel.py               # 32 requests, 128 prompt + 32 output tokens, 3 rounds
    python bench/pipeline_parallel.py --rounds 1 --num-requests 8 --layers 4 --hidden 256   # a quick look

One random-weight Llama (hidden 512, 8 layers, 8 query / 4 KV heads, a byte-level vocabulary; built on
the fly under .cache/) serves the same workload in turn: one process (with the threads of one rank,
and of two), two pipeline stages with each step's batch crossing them whole
(``pipeline_micro_batches=1``), and two stages with micro-batches in flight (automatic: two; and four).
Every request is submitted at once with ``ignore_eos``, so each length is exact and the steps are the same in
every row. The configurations take turns, ``--rounds`` times (a busy host's drift hits each alike);
reported is each one's median round: output tokens a second over the whole run, the mean step time,
and the CPU seconds of all ranks together (from /proc), which tells work added by the split from time
spent waiting. Last, what splitting costs with no pipeline at all: one process's CPU time for one
prefill step and one decode step, run whole and as 2 and 4 micro-batches.

The engine is fp32 on the CPU, one torch thread a rank by default (``--num-threads``): on a machine
with a core a rank, stage 1 computes micro-batch k while stage 0 computes micro-batch k + 1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backends.engine.config import EngineConfig  # noqa: E402
from backends.engine.llm_engine import LLMEngine  # noqa: E402
from backends.engine.parallel.micro_batches import split  # noqa: E402
from backends.engine.sampling_params import SamplingParams  # noqa: E402

SPECIALS = ["<|endoftext|>"]
VOCAB_SIZE = 256 + len(SPECIALS)


def build_model(path: Path, *, hidden: int, layers: int) -> Path:
    """A random Llama (``hidden`` wide, ``layers`` deep, 8 query / 4 KV heads) with a byte-level
    tokenizer, in HF format; kept under ``path`` for the next run."""
    if (path / "config.json").exists():
        return path
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = tokenizers.Tokenizer(models.BPE({ch: i for i, ch in enumerate(sorted(alphabet))}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": SPECIALS[0], "bos_token": None}))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        eos_token_id=256,
        pad_token_id=256,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@dataclass(frozen=True)
class Row:
    name: str
    output_tok_s: float
    step_ms: float
    prefill_ms: float
    """Mean step until every request has its first token (the prompts' steps)."""
    decode_ms: float
    """Mean step after that (one token a sequence)."""
    steps: int
    micro_batches: float
    """Mean micro-batches a step (1 for one process)."""
    cpu_s: float
    """CPU seconds of every rank's process over the measured run."""


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mean_ms(times: list[float]) -> float:
    return 1000 * sum(times) / max(1, len(times))


def run(name: str, model: Path, args: argparse.Namespace, **parallel: Any) -> Row:
    """The workload on one engine configuration, after a short warm-up."""
    config = EngineConfig(
        model=str(model),
        device="cpu",
        dtype="float32",
        num_threads=parallel.pop("num_threads", args.num_threads),
        kv_cache_bytes=256 << 20,
        max_num_seqs=args.num_requests,
        max_num_batched_tokens=args.max_batched_tokens,
        enable_prefix_caching=False,
        **parallel,
    )
    engine = LLMEngine(config)
    try:
        rng = random.Random(0)
        prompts = [[rng.randrange(256) for _ in range(args.prompt_len)] for _ in range(args.num_requests)]
        params = SamplingParams(temperature=0.0, max_tokens=args.output_len, ignore_eos=True)
        engine.generate(prompts[:2], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
        if engine.workers is not None:  # count the measured steps only
            engine.workers.num_steps = engine.workers.num_micro_batches = 0
        for i, prompt in enumerate(prompts):
            engine.add_request(f"r{i}", prompt, params)
        pids = [os.getpid()] + [p.pid or 0 for p in (engine.workers.processes if engine.workers else [])]
        cpu_before = sum(cpu_seconds(pid) for pid in pids)
        first_tokens = engine.stats().num_generated_tokens + args.num_requests  # the warm-up's, and one each
        prefill: list[float] = []
        decode: list[float] = []
        started = time.perf_counter()
        while engine.has_unfinished_requests():
            phase = decode if engine.stats().num_generated_tokens >= first_tokens else prefill
            step_started = time.perf_counter()
            engine.step()
            phase.append(time.perf_counter() - step_started)
        elapsed = time.perf_counter() - started
        steps = len(prefill) + len(decode)
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
        workers = engine.workers
        per_step = 1.0 if workers is None else workers.num_micro_batches / max(1, workers.num_steps)
        tokens = args.num_requests * args.output_len
        return Row(
            name,
            tokens / elapsed,
            1000 * elapsed / steps,
            mean_ms(prefill),
            mean_ms(decode),
            steps,
            per_step,
            cpu,
        )
    finally:
        engine.close()


def split_cost(model: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """What splitting costs with no pipeline at all: the CPU ms of one step run whole, as 2 and as 4
    contiguous micro-batches, in one process (best of 15): the workload's first prefill step, and a
    decode step of every request. A decode step reads every weight once per micro-batch."""
    costs: dict[str, list[float]] = {}
    for phase in ("prefill", "decode"):
        engine = LLMEngine(
            EngineConfig(
                model=str(model),
                device="cpu",
                num_threads=args.num_threads,
                kv_cache_bytes=256 << 20,
                max_num_seqs=args.num_requests,
                max_num_batched_tokens=args.max_batched_tokens,
                enable_prefix_caching=False,
            )
        )
        try:
            rng = random.Random(0)
            params = SamplingParams(temperature=0.0, max_tokens=args.output_len + 4, ignore_eos=True)
            for i in range(args.num_requests):
                engine.add_request(f"r{i}", [rng.randrange(256) for _ in range(args.prompt_len)], params)
            while phase == "decode" and engine.stats().num_generated_tokens < 2 * args.num_requests:
                engine.step()
            items = engine.scheduler.schedule().scheduled  # run by hand, never handed back: a probe
            costs[phase] = []
            for parts in (1, 2, 4):
                runs = split([item.num_new_tokens for item in items], min(parts, len(items)))
                best = float("inf")
                for _ in range(15):
                    started = time.process_time()
                    for r in runs:
                        engine.runner.run(items[r.start : r.stop])
                    best = min(best, time.process_time() - started)
                costs[phase].append(1000 * best)
        finally:
            engine.close()
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--max-batched-tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--num-threads", type=int, default=1, help="torch threads of each rank")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    name = f"bench-pipeline-llama-{args.hidden}x{args.layers}"
    model = build_model(REPO / ".cache" / name, hidden=args.hidden, layers=args.layers)
    threads = args.num_threads
    configurations: list[tuple[str, dict[str, Any]]] = [
        (f"1 process, {threads} thread(s)", {}),
        (f"1 process, {2 * threads} thread(s)", {"num_threads": 2 * threads}),
        ("PP=2, micro-batches 1", {"pipeline_parallel_size": 2, "pipeline_micro_batches": 1}),
        ("PP=2, micro-batches auto", {"pipeline_parallel_size": 2, "pipeline_micro_batches": 0}),
        ("PP=2, micro-batches 4", {"pipeline_parallel_size": 2, "pipeline_micro_batches": 4}),
    ]
    rounds: dict[str, list[Row]] = {label: [] for label, _ in configurations}
    for _ in range(args.rounds):
        for label, parallel in configurations:
            rounds[label].append(run(label, model, args, **dict(parallel)))
    rows = [sorted(r, key=lambda row: row.output_tok_s)[(len(r) - 1) // 2] for r in rounds.values()]
    print(
        f"{args.num_requests} requests x ({args.prompt_len} prompt + {args.output_len} output) tokens, "
        f"Llama {args.hidden}x{args.layers} fp32, {threads} thread(s) a rank, median of {args.rounds} "
        f"rounds, torch {torch.__version__}"
    )
    print(
        f"| {'configuration':<26} | output tok/s | step ms | prefill step ms | decode step ms | steps "
        "| micro-batches/step | CPU s |"
    )
    print(f"|{'-' * 28}|-------------:|--------:|{'-' * 16}:|{'-' * 15}:|------:|{'-' * 19}:|------:|")
    for row in rows:
        print(
            f"| {row.name:<26} | {row.output_tok_s:12.1f} | {row.step_ms:7.1f} | {row.prefill_ms:15.1f} "
            f"| {row.decode_ms:14.1f} | {row.steps:5d} | {row.micro_batches:18.2f} | {row.cpu_s:5.2f} |"
        )
    print("\nOne process, CPU ms of one step run whole and split (best of 15):")
    print("| step | whole | 2 micro-batches | 4 micro-batches |")
    print("|---|---:|---:|---:|")
    for phase, costs in split_cost(model, args).items():
        print(f"| {phase} | {costs[0]:.1f} | {costs[1]:.1f} | {costs[2]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
