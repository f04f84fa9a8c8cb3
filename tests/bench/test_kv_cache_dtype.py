"""bench/kv_cache_dtype.py (quoted in docs/engine.md): the kernel timing runs and reports every cache
dtype beside the float one (the quality half loads SmolLM2 and runs in the slow engine test's stead)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_kernel_timings_cover_every_cache_dtype() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "kv_cache_dtype.py"),
            "kernel",
            "--batch",
            "2",
            "--contexts",
            "64",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = json.loads(out.stdout)
    assert [(r["context"], r["query_dtype"]) for r in rows] == [(64, "float32"), (64, "bfloat16")]
    assert all(r["float_x"] == 1.0 and r["int8_us"] > 0 and r["fp8_us"] > 0 for r in rows)
