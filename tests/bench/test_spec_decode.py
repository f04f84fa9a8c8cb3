"""bench/spec_decode.py (quoted in docs/engine.md): plain, ngram and draft runs on one model, their
outputs compared token for token (the script fails when they differ)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.backends.engine.tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[2]


def test_speculative_runs_match_the_plain_run(tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "tiny", "gqa")
    args = ["--model", str(model), "--num-requests", "2", "--max-tokens", "16", "--json"]
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "spec_decode.py"),
            *args,
            "--method",
            "ngram",
            "--method",
            "draft",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(report) == {"plain", "ngram", "draft"}
    assert all(row["identical"] for row in report.values())
    assert report["plain"]["acceptance"] is None and report["draft"]["acceptance"] is not None
    assert report["plain"]["speedup"] == 1.0
