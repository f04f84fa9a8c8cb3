"""bench/batch_share.py (quoted in docs/batches.md) runs and reports each figure (the batch alone and
beside the clients), on a small batch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "batch_share.py"


def test_the_bench_reports_both_phases_and_the_batch() -> None:
    spec = importlib.util.spec_from_file_location("batch_share", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--lines", "20", "--seconds", "0.3", "--warmup-s", "0", "--clients", "1"])
    for phase in ("batch_alone", "batch_with_interactive"):
        assert result[phase]["status"] == "completed" and result[phase]["completed"] == 20
        assert result[phase]["lines_per_s"] > 0
    for phase in ("interactive_alone", "interactive_with_batch"):  # how many fit in a phase is timing
        assert set(result[phase]) == {"requests", "p50_ms", "p90_ms"}
