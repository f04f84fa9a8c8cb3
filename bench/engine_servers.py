"""The engine benchmark through servers (``bench/engine_throughput.py --through-server``, ``--baseline
vllm-cpu|sortyard``): Sortyard's OpenAI server (``python -m backends.server`` with the in-process run's
engine settings) and, with a baseline, vLLM's CPU build (bench/vllm_cpu.py) or a second Sortyard whose
environment differs by ``--baseline-env``.

Each server is started fresh, measured and stopped before the next (``run_servers``), or, with
``--rounds N``, both start first and the rounds run through each in alternating order
(``run_servers_paired``, bench/paired_servers.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.processes import ProcessSpec, free_port
from paired_servers import Contender, Work, rounds_table, run_paired
from server_workload import markdown_table, measure_server
from vllm_cpu import VllmCpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.engine.loader import smollm2_gguf_path

ROOT = Path(__file__).resolve().parents[1]


def run_servers(args: argparse.Namespace, work: Work) -> dict[str, object]:
    """Sortyard's server, then the baseline's (if any), each fresh, on the same requests."""
    log_dir = Path(tempfile.mkdtemp(prefix="engine-throughput-"))
    rows = [measure_one(c, args, work) for c in contenders(args, log_dir)]
    print(markdown_table(rows))
    result: dict[str, object] = {"rows": rows, "server_logs": str(log_dir)}
    if len(rows) == 2:
        result["output_tok_s_ratio"] = round(rows[0]["output_tok_s"] / rows[1]["output_tok_s"], 2)
        print(f"\n{rows[0]['system']} / {rows[1]['system']} output tok/s: {result['output_tok_s_ratio']}x")
    return result


def run_servers_paired(args: argparse.Namespace, workloads: list[Work]) -> dict[str, object]:
    """Both servers up at once, the ``workloads`` (one a round) through each in alternating order."""
    log_dir = Path(tempfile.mkdtemp(prefix="engine-throughput-"))
    first, second = contenders(args, log_dir)
    result = run_paired((first, second), args.model, workloads)
    print(rounds_table(result))
    a, b = result["contenders"]
    print(
        f"\n{a} / {b} output tok/s over {len(workloads)} paired rounds: median {result['median_ratio']}x "
        f"(geometric mean {result['geomean_ratio']}x, range {result['min_ratio']}-{result['max_ratio']}); "
        f"medians {result['median_output_tok_s'][a]} vs {result['median_output_tok_s'][b]}"
    )
    return {**result, "dtype": args.dtype, "server_logs": str(log_dir)}


def contenders(args: argparse.Namespace, log_dir: Path) -> list[Contender]:
    """Sortyard's server and, with a baseline, the baseline's: how each starts and where it listens."""
    port = free_port()
    found = [contender("sortyard", sortyard_argv(args, port), {}, port, log_dir)]
    baseline_env = dict(kv.split("=", 1) for kv in args.baseline_env)
    if args.baseline == "sortyard":
        port = free_port()
        found.append(contender("sortyard-baseline", sortyard_argv(args, port), baseline_env, port, log_dir))
    elif args.baseline == "vllm-cpu":
        vllm = VllmCpu()
        vllm.setup(smollm2_gguf_path())  # SmolLM2 only: engine_throughput.parse_args refuses other models
        port = free_port()
        argv = vllm.server_argv(
            port=port,
            dtype=args.dtype,
            served_model_name=args.model,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            seed=args.seed,
        )
        env = vllm.server_env(
            kv_cache_gib=max(1, round(args.kv_cache_mib / 1024)),  # vLLM reserves whole GiB
            cpus=sorted(os.sched_getaffinity(0))[: args.threads or None],
        )
        found.append(contender("vllm-cpu", argv, {**env, **baseline_env}, port, log_dir))
    return found


def contender(label: str, argv: list[str], env: dict[str, str], port: int, log_dir: Path) -> Contender:
    spec = ProcessSpec(label, tuple(argv), cpus=None, log_dir=log_dir, env=env, cwd=ROOT)
    return Contender(label, spec, f"http://127.0.0.1:{port}")


def sortyard_argv(args: argparse.Namespace, port: int) -> list[str]:
    """``python -m backends.server`` with the engine settings of the in-process run."""
    argv = [sys.executable, "-m", "backends.server", "--model", args.model, "--dtype", args.dtype,
            "--port", str(port), "--max-num-seqs", str(args.max_num_seqs),
            "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--kv-cache-bytes", str(args.kv_cache_mib << 20), "--seed", str(args.seed),
            "--embedding-model", "none", "--log-level", "warning"]  # fmt: skip
    if args.quantization:
        argv += ["--quantization", args.quantization]
    if args.threads:
        argv += ["--num-threads", str(args.threads)]
    return argv


def measure_one(server: Contender, args: argparse.Namespace, work: Work) -> dict[str, Any]:
    """Start one server, run the workload through it, stop it: one row of the table."""
    print(f"{server.label}: starting (log {server.spec.log_dir / server.label}.log)", file=sys.stderr)
    figures = measure_server(server.spec, server.base_url, args.model, *work)
    quant = f", {args.quantization}" if args.quantization else ""
    return {"system": f"{server.label} {args.model} ({args.dtype}{quant})", **figures}
