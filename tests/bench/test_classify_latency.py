"""The bench command docs/benchmarks.md quotes runs and reports every classifier and size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_classify_latency_bench_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "classify_latency.py"), "--iterations", "30", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    results = json.loads(out.stdout)["results"]
    assert {(r["classifier"].split()[0], r["tokens"]) for r in results} == {
        (c, t) for c in ("rules", "learned", "examples") for t in ("10", "100", "1k")
    }
    assert all(r["p50_ms"] > 0 for r in results)


def test_classify_latency_bench_measures_another_model_side_by_side(shipped_model_bytes: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other.bin"
        other.write_bytes(shipped_model_bytes)
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "classify_latency.py"),
                "--iterations",
                "5",
                "--json",
                "--model",
                str(other),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            timeout=120,
        )
    names = {r["classifier"] for r in json.loads(out.stdout)["results"]}
    assert "learned other.bin" in names
