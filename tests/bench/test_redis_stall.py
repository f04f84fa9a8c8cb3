"""bench/redis_stall.py: a short freeze of a real Redis under load; the key's lease set empties after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.servers.redis_server import find_redis_binary

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(find_redis_binary() is None, reason="no redis-server binary")
def test_the_bench_reports_the_leases_and_the_follow_up(tmp_path: Path) -> None:
    out = tmp_path / "redis_stall.json"
    args = ["--freeze-s", "1", "--clients", "8", "--before-s", "1", "--after-s", "1"]
    args += ["--follow-up-s", "1", "--wait-s", "15", "--json-out", str(out)]
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "redis_stall.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lease set when the load stopped" in done.stdout
    result = json.loads(out.read_text())
    assert {
        "credit",
        "mode",
        "freeze_s",
        "clients",
        "max_concurrent",
        "outage",
        "leases_at_load_end",
        "emptied",
        "emptied_after_s",
        "leases_left",
        "follow_up",
    } <= set(result)
    assert (result["credit"], result["mode"], result["clients"]) == (True, "fail_closed", 8)
    assert result["emptied"] and result["leases_left"] == 0
    assert 0 <= result["emptied_after_s"] <= 15
    assert {"200", "429", "503"} <= set(result["outage"]) and {"200", "429"} <= set(result["follow_up"])
    assert result["outage"]["200"] > 0 and result["follow_up"]["200"] > 0
