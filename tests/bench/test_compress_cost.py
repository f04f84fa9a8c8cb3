"""The compression cost bench that docs/benchmarks.md quotes runs and reports every body and coding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compress_cost_bench_runs() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "compress_cost.py"),
            "--repeat",
            "20",
            "--rounds",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    results = {(r["body"], r["coding"]): r for r in json.loads(out.stdout)["results"]}
    assert set(results) == {
        (b, c) for b in ("short", "long", "embeddings") for c in ("off", "zstd", "br", "gzip")
    }
    for coding in ("zstd", "br", "gzip"):
        assert results[("short", coding)]["encoded_bytes"] == results[("short", coding)]["bytes"]  # threshold
        assert results[("long", coding)]["encoded_bytes"] < results[("long", coding)]["bytes"]
        assert results[("embeddings", coding)]["cpu_us"] > 0
