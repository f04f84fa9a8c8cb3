"""The 30-second load-test smoke run: ``loadtests/run.py`` as ``make loadtest`` runs it, minus the engine.

run.py starts ``sortyard run --no-engine`` on a policy whose pools are the fast fake upstream
(in this process), adds its over-limit key, reads the key from the printed export line, runs Locust
headless for 30 s with 8 users of every class, and stops the gateway. The run must show no
unexpected failures, every user class must have made requests, and the over-limit user's 429s
(expected) must have happened. The cost command then reads the run's CSV.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli import main
from loadtests.config import REQUEST_NAMES
from loadtests.report import read_failures, read_stats
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import write_policy
from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cost_main(argv: list[str]) -> int:
    """``sortyard cost ...`` in-process."""
    return main(["cost", *argv])


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    try:
        yield fake
    finally:
        fake.stop()


def test_thirty_second_load_test_has_no_unexpected_failures(
    tmp_path: Path, upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    def pool(model: str) -> dict[str, object]:
        return {"replicas": [{"base_url": upstream.base_url, "model": model}]}

    policy = write_policy(
        tmp_path / "policy.yaml",
        {
            "version": 1,
            "timeouts": {"connect_s": 2, "first_byte_s": 20, "idle_s": 20, "total_s": 60},
            "pools": {
                "small": pool("fake-small"),
                "medium": pool("fake-medium"),
                "large": pool("fake-large"),
            },
            # until the classifier routes "auto", an alias stands in for it
            "aliases": {"auto": "small", "gpt-4o-mini": "small"},
            "store": {"url_env": None},  # the in-process store, whatever the environment says
            "cache": {"response": {"enabled": True, "ttl_s": 300}},
        },
    )
    results = tmp_path / "results"
    command = [sys.executable, str(REPO / "loadtests" / "run.py"), "--policy", str(policy), "--no-engine"]
    command += ["--port", str(free_port()), "--duration", "30s", "--users", "8", "--shape", "steady"]
    command += ["--name", "smoke", "--results-dir", str(results), "--stop-timeout", "10s"]
    command += ["--start-timeout", "60", "--max-tokens", "16"]
    # cwd: where `sortyard run` keeps its dev key (.local/dev-key), never the repository's
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=150)
    output = done.stdout[-4000:] + done.stderr[-4000:]

    prefix = results / "smoke"
    assert Path(f"{prefix}_stats.csv").exists(), output
    assert read_failures(prefix) == [], output
    rows = read_stats(prefix)
    assert not [f"{r.type} {r.name}" for r in rows if r.num_failures], output
    assert done.returncode == 0, output
    counts = {r.name: r.num_requests for r in rows if r.type == "POST"}
    for user_class, names in REQUEST_NAMES.items():
        assert sum(counts.get(n, 0) for n in names) > 0, f"{user_class} made no requests: {counts}"
    assert counts.get("over-limit 429", 0) > 0, counts  # the limit did its job, and that counted as success
    custom = {(r.type, r.name): r.num_requests for r in rows if r.type not in ("POST", "GET")}
    assert custom.get(("SSE", "ttft"), 0) > 0 and custom.get(("SSE", "tokens_per_s"), 0) > 0, custom
    assert custom.get(("TOKENS", "output"), 0) > 0, custom
    assert custom.get(("CACHE", "hit"), 0) > 0, custom  # five questions at temperature 0 repeat
    assert Path(f"{prefix}.html").stat().st_size > 0

    argv = ["estimate", "--requests-per-month", "1000000", "--tokens-per-request", "100"]
    assert cost_main([*argv, "--gpu-hour-usd", "2", "--from-result", f"{prefix}_stats.csv"]) == 0
    assert "monthly cost: $" in capsys.readouterr().out
