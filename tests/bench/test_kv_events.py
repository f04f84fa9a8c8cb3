"""bench/kv_events.py (quoted in docs/routing.md): a tiny run applies every batch the reference engine's
publishers sent, through the gateway's subscriber, and reports its CPU per batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "kv_events.py"


def test_every_published_batch_is_followed() -> None:
    argv = ["--replicas", "2", "--rate", "20", "--seconds", "0.5", "--cache-blocks", "64"]
    done = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["batches"] == 20
    assert result["cpu_us_per_batch"] > 0
    assert all(held > 0 for held in result["blocks_held"])
