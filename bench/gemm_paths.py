"""fp32 GEMMs at SmolLM2's layer shapes through the three CPU paths torch offers, GFLOPS each.

    python bench/gemm_paths.py                 # rows 1, 16, 64, 512, 2048
    python bench/gemm_paths.py --rows 16,64

Paths: oneDNN with the weight prepacked (``torch.ops.mkldnn._linear_pointwise``, what
``MergedLinear`` runs), MKL's packed sgemm (``torch.ops.mkl._mkl_linear``, what torch's inductor
picks for frozen fp32 linears where MKL exists), and plain ``F.linear``. The calls alternate path by
path, five rounds of about 2 GFLOP each, and the figure is each path's median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

SHAPES = {
    "qkv": (960, 576),
    "o": (576, 576),
    "gate_up": (3072, 576),
    "down": (576, 1536),
    "lm_head": (49152, 576),
}
"""(out, in) of SmolLM2-135M's merged weights."""


def paths(x: torch.Tensor, w: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    rows = x.shape[0]
    onednn = torch.ops.mkldnn._reorder_linear_weight(w, rows)
    mkl = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    return {
        "onednn_packed": lambda: torch.ops.mkldnn._linear_pointwise(x, onednn, None, "none", [], ""),
        "mkl_packed": lambda: torch.ops.mkl._mkl_linear(x, mkl, w, None, rows),
        "f_linear": lambda: F.linear(x, w),
    }


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="1,16,64,512,2048")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    results = []
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k) * 0.02
        for m in map(int, args.rows.split(",")):
            x = torch.randn(m, k)
            fns = paths(x, w)
            expected = fns["f_linear"]()
            for label, fn in fns.items():
                torch.testing.assert_close(fn(), expected, rtol=1e-3, atol=1e-3, msg=label)
            reps = max(3, int(2e9 / (2 * m * n * k)))
            seconds: dict[str, list[float]] = {label: [] for label in fns}
            for _ in range(5):
                for label, fn in fns.items():
                    start = time.perf_counter()
                    for _ in range(reps):
                        fn()
                    seconds[label].append((time.perf_counter() - start) / reps)
            gflops = {
                label: round(2 * m * n * k / statistics.median(s) / 1e9, 1) for label, s in seconds.items()
            }
            row = {"weight": name, "rows": m, "threads": torch.get_num_threads(), **gflops}
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


if __name__ == "__main__":
    main()
