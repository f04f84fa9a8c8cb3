"""Smoke test of bench/overhead.py: the whole harness for ~1 s a point, output parsed.

Skips only when nginx or wrk is not installed (``apt-get install nginx wrk``). Includes the gateway
row when ``sortyard serve`` exists, else measures nginx direct and the bare forwarder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness.errors import WrkError
from harness.nginx import CannedUpstream
from harness.wrk import WrkRun, run_wrk

REPO_ROOT = Path(__file__).resolve().parents[2]
OVERHEAD = REPO_ROOT / "bench" / "overhead.py"
GATEWAY_CLI = REPO_ROOT / "gateway" / "cli" / "serve.py"

needs_tools = pytest.mark.skipif(
    shutil.which("wrk") is None or (shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists()),
    reason="nginx and wrk are not installed (apt-get install nginx wrk)",
)
pytestmark = [pytest.mark.slow, needs_tools]


def _has_gateway_serve() -> bool:
    return GATEWAY_CLI.is_file() and "serve" in GATEWAY_CLI.read_text()


def _pin_args() -> list[str]:
    # The default pinning wants CPUs 0 and 1; a one-CPU runner still gets a (noisy) smoke run.
    return [] if {0, 1} <= os.sched_getaffinity(0) else ["--no-pin"]


def test_overhead_runs_and_reports(tmp_path: Path) -> None:
    json_out = tmp_path / "overhead.json"
    argv = [
        sys.executable,
        str(OVERHEAD),
        "--duration",
        "1",
        "--warmup",
        "1",
        "--concurrency",
        "1,16",
        "--json-out",
        str(json_out),
        *_pin_args(),
    ]
    with_gateway = _has_gateway_serve()
    if not with_gateway:
        argv.append("--no-gateway")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"

    assert proc.stdout.startswith("| target | req/s c=1/16 |")
    data = json.loads(json_out.read_text())
    rows = {row["label"]: row for row in data["rows"]}
    expected = {"nginx direct", "bare forwarder"} | ({"gateway"} if with_gateway else set())
    assert set(rows) == expected
    for row in rows.values():
        assert set(row["requests_per_s"]) == {"1", "16"}
        assert all(v > 0 for v in row["requests_per_s"].values())
        assert all(v > 0 for v in row["p99_ms"].values())
        assert row["streams_per_s"] > 0
        assert row["rss_mib"] > 1
        assert f"| {row['label']} |" in proc.stdout
    assert rows["nginx direct"]["added_p50_ms_c1"] is None
    assert rows["bare forwarder"]["added_p50_ms_c1"] is not None
    assert all(
        p["errors"] == {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
        for p in data["points"]
    )


@pytest.mark.skipif(not _has_gateway_serve(), reason="gateway/cli/__init__.py has no serve command yet")
def test_compare_two_gateway_configs_with_redis(tmp_path: Path) -> None:
    json_out = tmp_path / "compare.json"
    template = REPO_ROOT / "bench" / "harness" / "policy.yaml.tmpl"
    argv = [
        sys.executable,
        str(OVERHEAD),
        "--duration",
        "1",
        "--warmup",
        "0",
        "--concurrency",
        "16",
        "--no-standin",
        "--redis",
        "--json-out",
        str(json_out),
        *_pin_args(),
        "--compare",
        f"base={template}",
        f"redis={template},SORTYARD_REDIS_URL=${{REDIS_URL}}",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    rows = {row["label"]: row for row in json.loads(json_out.read_text())["rows"]}
    assert set(rows) == {"nginx direct", "base", "redis"}
    assert rows["redis"]["env"]["SORTYARD_REDIS_URL"].startswith("redis://127.0.0.1:")
    assert rows["base"]["env"] == {}
    assert rows["base"]["requests_per_s"]["16"] > 0 and rows["redis"]["streams_per_s"] > 0


def test_wrk_errors_fail_loudly(tmp_path: Path) -> None:
    upstream = CannedUpstream(tmp_path, None)
    upstream.start()
    try:
        with pytest.raises(WrkError, match="counted errors"):
            run_wrk(WrkRun(upstream.base_url + "/no/such/path", num_connections=2, duration_s=1, cpus=None))
    finally:
        upstream.stop()
