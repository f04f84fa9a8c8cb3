"""bench/departures.py (quoted in docs/security.md) runs and reports every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_bench_reports_departures_and_cuts(tmp_path: Path) -> None:
    out = tmp_path / "departures.json"
    subprocess.run(
        [sys.executable, str(REPO / "bench" / "departures.py"), "--trials", "3", "--json-out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    results = json.loads(out.read_text())
    assert {"plain departure ms", "stream departure ms"} <= set(results)
    assert all(row["p50"] >= 0 for row in results.values())
