"""bench/model_dedup.py (quoted in docs/engine.md): names on one source build one engine, copies two."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.backends.engine.tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[2]


def test_shared_names_build_one_engine_and_copies_cost_more(tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "tiny", "gqa")
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "model_dedup.py"), "--model", str(model)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = {row["variant"]: row for row in json.loads(out.stdout.strip().splitlines()[-1])["rows"]}
    assert (rows["one"]["engines"], rows["shared"]["engines"], rows["copies"]["engines"]) == (1, 1, 2)
    assert rows["shared"]["names"] == rows["copies"]["names"] == 2
