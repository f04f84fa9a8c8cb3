"""The device checks beside the engine runs: memory bandwidth (a measured device-to-device copy, and the
GPU's rated figure), the quantized GEMMs' error and time against bf16, and the GPU tests through pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from backends.engine.layers.int4 import Int4Weight
from backends.engine.layers.int8 import Int8Weight
from gpu.table import Row

RATED_BANDWIDTH_GB_S = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("L4", 300.0),
)
"""HBM bandwidth by the maker's data sheet, matched in order against ``torch.cuda.get_device_name()``."""
GPU_TESTS = ("tests/backends/engine/kernels/triton", "tests/backends/engine/test_gpu_path.py")
"""The Triton kernels' tests (compiled, not interpreted) and the engine's CUDA tests (skipped on CPU)."""


def rated_bandwidth_gb_s(device_name: str) -> float | None:
    """The data-sheet bandwidth of the GPU named ``device_name``; None for one not in the table."""
    return next((gb_s for name, gb_s in RATED_BANDWIDTH_GB_S if name in device_name), None)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn: Callable[[], object], device: torch.device, repeats: int = 50) -> float:
    """Mean seconds of ``fn`` over ``repeats`` back-to-back calls, after three warm-up calls."""
    for _ in range(3):
        fn()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def copy_bandwidth_gb_s(device: torch.device, num_bytes: int) -> float:
    """GB/s of a ``num_bytes`` device-to-device copy, read and write counted (the reachable peak)."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = seconds_per_call(lambda: dst.copy_(src), device, repeats=10)
    return 2 * num_bytes / seconds / 1e9


def bandwidth_rows(device: torch.device, num_bytes: int) -> tuple[list[Row], float]:
    """The device's name, rated and measured bandwidth; and the measured GB/s (the reference)."""
    measured = copy_bandwidth_gb_s(device, num_bytes)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        rated = rated_bandwidth_gb_s(name)
        note = "not in the table" if rated is None else f"{measured / rated:.0%} of rated"
        rows = [
            Row("device", "GPU", name, note=f"torch {torch.__version__}, CUDA {torch.version.cuda}"),
            Row("device", "rated memory bandwidth", rated, "GB/s", "data sheet"),
            Row("device", "copy bandwidth (device to device)", measured, "GB/s", note),
        ]
    else:
        rows = [
            Row("device", "CPU", f"{os.cpu_count()} cores", note=f"torch {torch.__version__}"),
            Row("device", "copy bandwidth (host memory)", measured, "GB/s", f"{num_bytes >> 20} MiB copied"),
        ]
    return rows, measured


def _rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm())


def quantized_gemm_rows(
    device: torch.device, shapes: Sequence[tuple[str, int, int]], batch_rows: Sequence[int]
) -> list[Row]:
    """For each (label, out, in) weight: int8 through torch's kernel and dequantized, int4 on its path,
    each against its own dequantized weight (the error the kernels add) and timed beside bf16."""
    rows: list[Row] = []
    gen = torch.Generator(device=device).manual_seed(0)
    for label, out_features, in_features in shapes:
        weight = torch.randn(out_features, in_features, generator=gen, device=device) * 0.02
        int8_kernel = Int8Weight(weight, None)
        int8_kernel.max_kernel_rows = None  # the kernel at every size, to time it
        int8_dequant = Int8Weight(weight, None, use_kernel=False)
        int4 = Int4Weight.from_float(weight, None)
        dense = weight.to(torch.bfloat16)
        for num_rows in batch_rows:
            x = torch.randn(num_rows, in_features, generator=gen, device=device).to(torch.bfloat16)
            bf16_s = seconds_per_call(lambda: F.linear(x, dense), device)  # noqa: B023
            cases: list[tuple[str, Callable[[], torch.Tensor], torch.Tensor] | None] = [
                ("int8 kernel", lambda: int8_kernel.matmul(x), int8_kernel.dequantized())  # noqa: B023
                if int8_kernel.has_kernel
                else None,
                ("int8 dequantize", lambda: int8_dequant.matmul(x), int8_dequant.dequantized()),  # noqa: B023
                (f"int4 {int4.path}", lambda: int4.matmul(x), int4.dequantized()),  # noqa: B023
            ]
            for case in cases:
                if case is None:
                    rows.append(
                        Row(f"quant {label}", f"int8 kernel, batch {num_rows}", None, note="no kernel")
                    )
                    continue
                name, fn, w = case
                error = _rel_error(fn(), x.float() @ w.t())
                seconds = seconds_per_call(fn, device)
                note = (
                    f"rel. error {error:.1e}; bf16 {bf16_s * 1e6:.1f} us, {bf16_s / seconds:.2f}x its speed"
                )
                rows.append(Row(f"quant {label}", f"{name}, batch {num_rows}", seconds * 1e6, "us", note))
    return rows


def run_gpu_tests(root: Path, paths: Sequence[str], timeout_s: float) -> list[Row]:
    """pytest over ``paths`` with Triton compiling (``TRITON_INTERPRET=0``: the kernels' conftest turns
    the interpreter on when the variable is unset); the summary line, and the failures on stderr."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [Row("tests", "pytest " + " ".join(paths), None, note=f"timed out after {timeout_s:.0f} s")]
    seconds = time.perf_counter() - start
    lines = (done.stdout + done.stderr).strip().splitlines()
    summary = next(
        (ln.strip("= ") for ln in reversed(lines) if re.search(r"\d+ (passed|failed|error)", ln)), ""
    )
    if done.returncode != 0:
        print("\n".join(lines[-60:]), file=sys.stderr)
    note = f"{seconds:.0f} s, exit {done.returncode}"
    return [Row("tests", "pytest " + " ".join(paths), summary or "no summary", note=note)]
