"""bench/drain.py (quoted in docs/security.md) runs and reports every figure, in the order a drain has."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_bench_reports_port_cut_and_exit(tmp_path: Path) -> None:
    out = tmp_path / "drain.json"
    command = [sys.executable, str(REPO / "bench" / "drain.py"), "--trials", "1", "--deadline-s", "1"]
    subprocess.run(
        [*command, "--json-out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    results = json.loads(out.read_text())
    assert set(results) == {"port closed s", "streams cut s", "exit s"}
    port, cut, exit_ = (results[name]["median"] for name in ("port closed s", "streams cut s", "exit s"))
    assert 0 <= port < 1 <= cut <= exit_  # nothing is cut before the deadline
