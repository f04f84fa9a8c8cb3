"""bench/gateway_ab.py: rounds alternate which side goes first; the summary pairs each round's runs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gateway_ab
import pytest
from harness.redis import find_redis_binary
from harness.wrk import WrkResult

REPO_ROOT = Path(__file__).resolve().parents[2]


def _result(requests_per_s: float, p50_ms: float = 1.0) -> WrkResult:
    return WrkResult(
        int(requests_per_s), 1.0, requests_per_s, p50_ms, p50_ms, p50_ms, p50_ms, p50_ms, p50_ms, 0, {}
    )


def test_rounds_alternate_which_side_goes_first() -> None:
    assert [gateway_ab.round_order(i) for i in range(3)] == [
        ("before", "after"),
        ("after", "before"),
        ("before", "after"),
    ]


def test_the_summary_pairs_each_rounds_runs() -> None:
    before = [_result(1000, 0.6), _result(500, 2.0), _result(1200, 0.5)]
    after = [_result(1100, 0.55), _result(400, 2.5), _result(1200, 0.5)]
    summary = gateway_ab.paired_summary(before, after)
    assert summary["rounds"] == 3
    assert summary["ratios"] == [1.1, 0.8, 1.0]
    assert summary["median_ratio"] == 1.0
    assert summary["geometric_mean_ratio"] == round((1.1 * 0.8 * 1.0) ** (1 / 3), 3)
    assert summary["before"]["median_requests_per_s"] == 1000
    assert summary["after"]["median_p50_ms"] == 0.55


def test_rounds_must_pair_up() -> None:
    with pytest.raises(ValueError, match="one result per side and round"):
        gateway_ab.paired_summary([_result(1)], [])


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("wrk") is None or (shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists()),
    reason="nginx and wrk are not installed (apt-get install nginx wrk)",
)
@pytest.mark.skipif(find_redis_binary() is None, reason="no redis-server binary")
def test_a_tree_against_itself(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    pin = [] if {0, 1} <= os.sched_getaffinity(0) else ["--client-cpus", "0", "--gateway-cpus", "0"]
    argv = ["--before", str(REPO_ROOT), "--rounds", "2", "--duration", "1", "--json-out", str(out), *pin]
    assert gateway_ab.main(argv) == 0
    summary = json.loads(out.read_text())
    assert summary["rounds"] == 2 and len(summary["ratios"]) == 2
    assert all(ratio > 0 for ratio in summary["ratios"])
    assert summary["trees"] == {"before": str(REPO_ROOT), "after": str(REPO_ROOT)}


def test_the_summary_carries_each_sides_cpu_per_request() -> None:
    summary = gateway_ab.paired_summary(
        [_result(100), _result(100)],
        [_result(200), _result(200)],
        {"before": [0.5, 0.7], "after": [0.3, 0.2]},
    )
    assert summary["before"]["median_cpu_ms_per_request"] == 0.6
    assert summary["after"]["median_cpu_ms_per_request"] == 0.25
