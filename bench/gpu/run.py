"""The engine's GPU path on one GPU, in one table (under 8 minutes on an H200):

    python bench/gpu/run.py              # on a machine with a CUDA device
    python bench/gpu/run.py --dry-run    # anywhere: the tiny model on the CPU, in seconds

It runs the GPU tests (the Triton kernels compiled, the engine's CUDA tests); decodes one sequence and
the 64-request workload (bench/engine_throughput.py's lengths) eagerly and through CUDA graphs on
SmolLM2-135M's and Llama 3.2 1B's shapes with random bf16 weights made on the device; sets each decode
step's bytes (weights plus the KV it reads) against a measured device-to-device copy and the GPU's rated
bandwidth; runs SmolLM2's shapes on the same machine's CPU (fewer requests) for scale; and times the int8
and int4 GEMMs against bf16 with their error. The dry run does all of it but the tests on the tiny model
and the CPU, its "graphs" through the eager twin of CUDA graphs (``cuda_graphs.EagerGraphCapturer``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT, ROOT / "bench"):  # the product, and this package as ``gpu``
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

from backends.engine.cuda_graphs import EagerGraphCapturer  # noqa: E402
from backends.engine.device_memory import estimate_activation_bytes  # noqa: E402
from backends.openmp import default_num_threads  # noqa: E402
from gpu.checks import GPU_TESTS, bandwidth_rows, quantized_gemm_rows, run_gpu_tests  # noqa: E402
from gpu.models import MODELS, weight_bytes_per_step  # noqa: E402
from gpu.table import Row, format_table, gb_per_s  # noqa: E402
from gpu.workload import (  # noqa: E402
    DecodeResult,
    EngineSpec,
    Workload,
    WorkloadResult,
    free_device_memory,
    measure_decode,
    run_workload,
)

MB = 1e6


@dataclass(frozen=True)
class Plan:
    """What one run measures, and at which sizes."""

    device: str
    dtype: str
    models: tuple[str, ...]
    num_requests: int
    prompt_lens: tuple[int, int]
    output_lens: tuple[int, int]
    decode_prompt_len: int
    decode_tokens: int
    max_num_seqs: int
    max_model_len: int
    kv_cache_bytes: int | None
    cpu_model: str
    cpu_requests: int
    quant_shapes: tuple[tuple[str, int, int], ...]
    quant_rows: tuple[int, ...]
    copy_bytes: int
    run_tests: bool
    twin_graphs: bool
    """Capture the "graphs" runs with the eager twin (the dry run: no CUDA)."""


def gpu_plan(args: argparse.Namespace) -> Plan:
    return Plan(
        device="cuda",
        dtype="bfloat16",
        models=tuple(args.models),
        num_requests=args.num_requests,
        prompt_lens=(32, 512),
        output_lens=(16, 256),
        decode_prompt_len=128,
        decode_tokens=256,
        max_num_seqs=64,
        max_model_len=1024,
        kv_cache_bytes=None,  # --gpu-memory-utilization's default
        cpu_model="smollm2-135m",
        cpu_requests=args.cpu_requests,
        quant_shapes=(("smollm2 gate|up", 3072, 576), ("llama-1b gate|up", 16384, 2048)),
        quant_rows=(1, 256),
        copy_bytes=1 << 30,
        run_tests=not args.skip_tests,
        twin_graphs=False,
    )


def dry_plan() -> Plan:
    return Plan(
        device="cpu",
        dtype="float32",
        models=("tiny",),
        num_requests=6,
        prompt_lens=(8, 48),
        output_lens=(4, 16),
        decode_prompt_len=16,
        decode_tokens=12,
        max_num_seqs=8,
        max_model_len=128,
        kv_cache_bytes=16 << 20,
        cpu_model="tiny",
        cpu_requests=3,
        quant_shapes=(("tiny", 64, 64),),
        quant_rows=(1, 16),
        copy_bytes=64 << 20,
        run_tests=False,
        twin_graphs=True,
    )


def _measure(
    spec: EngineSpec, plan: Plan, work: Workload, *, graphs: bool
) -> tuple[DecodeResult, WorkloadResult, int]:
    """One engine's batch-1 decode and workload, and its KV blocks; the engine is dropped on return."""
    capturer = EagerGraphCapturer() if graphs and plan.twin_graphs else None
    engine = spec.build(enforce_eager=not graphs, capturer=capturer)
    if graphs and engine.runner.decode_graphs is None:
        raise RuntimeError("no decode graphs were captured")
    decode = measure_decode(engine, plan.decode_prompt_len, plan.decode_tokens)
    return decode, run_workload(engine, work), engine.block_manager.num_blocks


def model_rows(name: str, plan: Plan, copy_gb_s: float) -> list[Row]:
    """Eager against graphs on one model: batch-1 decode, the workload; the bytes a step reads and the
    bandwidth that makes, for the last mode that ran (graphs, unless they failed)."""
    spec = EngineSpec(
        name, plan.device, plan.dtype, plan.max_num_seqs, plan.max_model_len, plan.kv_cache_bytes
    )
    cfg = MODELS[name]
    work = Workload.build(
        plan.num_requests, cfg.vocab_size, prompt_lens=plan.prompt_lens, output_lens=plan.output_lens
    )
    section = f"{name} {plan.dtype} {plan.device}"
    rows: list[Row] = []

    def add(measurement: str, value: float | None, unit: str, note: str = "") -> None:
        rows.append(Row(section, measurement, value, unit, note))

    runs: dict[str, tuple[DecodeResult, WorkloadResult, int]] = {}
    for mode in ("eager", "graphs (eager twin)" if plan.twin_graphs else "CUDA graphs"):
        try:
            runs[mode] = _measure(spec, plan, work, graphs=mode != "eager")
        except Exception as exc:  # graphs failing to capture must not lose the eager figures
            add(f"{mode}: failed", None, "", f"{type(exc).__name__}: {exc}"[:200])
        free_device_memory(torch.device(plan.device))
    eager = runs.get("eager")
    for mode, (decode, result, _) in runs.items():
        vs_decode = "" if eager is None or mode == "eager" else f"; {_ratio(decode, eager[0])}"
        vs_work = "" if eager is None or mode == "eager" else f"; {_ratio(result, eager[1])}"
        batch_1 = f"prompt {plan.decode_prompt_len}, {plan.decode_tokens} tokens{vs_decode}"
        add(f"decode, batch 1, {mode}", decode.tok_s, "tok/s", batch_1)
        tokens = f"{work.num_output_tokens} output tokens, {result.num_steps} steps{vs_work}"
        add(f"{plan.num_requests} requests, {mode}", result.output_tok_s, "output tok/s", tokens)
    if not runs:
        return rows
    mode, (decode, result, num_blocks) = list(runs.items())[-1]
    weights = weight_bytes_per_step(cfg, spec.dtype_bytes)
    kv_per_token = spec.kv_bytes_per_token
    context = plan.decode_prompt_len + plan.decode_tokens / 2  # the mean context a batch-1 decode reads
    step_bytes = weights + context * kv_per_token
    kv_note = f"weights {weights / MB:.1f} MB + KV {context * kv_per_token / MB:.2f} MB"
    add("bytes per decode step, batch 1", step_bytes / MB, "MB", kv_note)
    batch_1_gb_s = step_bytes * decode.tok_s / 1e9
    add(f"bandwidth, batch 1, {mode}", batch_1_gb_s, "GB/s", f"{batch_1_gb_s / copy_gb_s:.0%} of the copy's")
    work_bytes = result.num_steps * weights + work.kv_tokens_read() * kv_per_token
    floor = "a floor: the prefill steps' time is in it"
    add(
        f"bandwidth, {plan.num_requests} requests, {mode}", gb_per_s(work_bytes, result.wall_s), "GB/s", floor
    )
    add("KV cache", num_blocks, "blocks", f"{kv_per_token} bytes a token")
    if result.peak_step_bytes is not None:
        estimate = estimate_activation_bytes(
            cfg,
            num_batched_tokens=2048,
            max_num_seqs=plan.max_num_seqs,
            max_model_len=plan.max_model_len,
            dtype_bytes=spec.dtype_bytes,
        )
        note = f"estimate {estimate / MB:.0f} MB (kv_sizing plans with it)"
        add("step peak above resting memory", result.peak_step_bytes / MB, "MB", note)
    return rows


def cpu_rows(plan: Plan) -> list[Row]:
    """The CPU path of the same machine, fp32 (faster than bf16 at decode sizes), fewer requests."""
    threads = default_num_threads()
    spec = EngineSpec(
        plan.cpu_model, "cpu", "float32", plan.max_num_seqs, plan.max_model_len, 512 << 20, threads
    )
    cfg = MODELS[plan.cpu_model]
    work = Workload.build(
        plan.cpu_requests, cfg.vocab_size, prompt_lens=plan.prompt_lens, output_lens=plan.output_lens
    )
    engine = spec.build(enforce_eager=True)
    decode = measure_decode(engine, plan.decode_prompt_len, plan.decode_tokens)
    result = run_workload(engine, work)
    section = f"{plan.cpu_model} float32 cpu ({threads} threads)"
    note = f"{plan.cpu_requests} of the {plan.num_requests} requests, {work.num_output_tokens} output tokens"
    return [
        Row(section, "decode, batch 1", decode.tok_s, "tok/s", f"prompt {plan.decode_prompt_len}"),
        Row(section, f"{plan.cpu_requests} requests", result.output_tok_s, "output tok/s", note),
    ]


def _ratio(value: DecodeResult | WorkloadResult, base: DecodeResult | WorkloadResult) -> str:
    """How many times faster than eager ``value`` ran."""
    rate, base_rate = (r.tok_s if isinstance(r, DecodeResult) else r.output_tok_s for r in (value, base))
    return f"{rate / base_rate:.2f}x eager" if base_rate > 0 else ""


def _section(name: str, build: Callable[[], list[Row]]) -> list[Row]:
    """Run one part of the table; a failure becomes a row rather than ending the run."""
    try:
        return build()
    except Exception as exc:  # one part failing on an unseen GPU must not lose the others
        return [Row(name, "failed", None, note=f"{type(exc).__name__}: {exc}"[:200])]


def main(argv: Sequence[str] | None = None) -> list[Row]:
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run, or on a GPU machine")
    plan = dry_plan() if args.dry_run else gpu_plan(args)
    started = time.perf_counter()
    rows: list[Row] = []
    if plan.run_tests:
        rows += run_gpu_tests(ROOT, GPU_TESTS, timeout_s=args.tests_timeout_s)
    device_rows, copy_gb_s = bandwidth_rows(torch.device(plan.device), plan.copy_bytes)  # the reference
    rows += device_rows
    for name in plan.models:
        rows += _section(name, functools.partial(model_rows, name, plan, copy_gb_s))
    rows += _section("cpu", lambda: cpu_rows(plan))
    device = torch.device(plan.device)
    rows += _section("quant", lambda: quantized_gemm_rows(device, plan.quant_shapes, plan.quant_rows))
    rows.append(Row("run", "wall time", time.perf_counter() - started, "s"))
    print(format_table(rows), flush=True)
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python bench/gpu/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the tiny model on the CPU: checks the script")
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "llama-1b"], choices=sorted(MODELS))
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--cpu-requests", type=int, default=8, help="requests of the CPU run, for scale")
    parser.add_argument("--skip-tests", action="store_true", help="no pytest run first")
    parser.add_argument("--tests-timeout-s", type=float, default=240.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
