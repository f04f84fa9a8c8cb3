"""A distributed load test: ``loadtests/run.py --processes 2`` (a Locust master and two workers) through a
real gateway (``sortyard run --no-engine``) on the fake upstream. The master's summary must count
every request of both workers: each worker made requests, the per-worker counts add up to the CSV's
total, and that total is what the upstream received.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.report import read_failures, read_stats, read_workers
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import write_policy
from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    try:
        yield fake
    finally:
        fake.stop()


def test_two_workers_are_summed_by_the_master(tmp_path: Path, upstream: FakeUpstream) -> None:
    replicas = [{"base_url": upstream.base_url, "model": "fake-small"}]
    policy = write_policy(
        tmp_path / "policy.yaml",
        {
            "version": 1,
            "timeouts": {"connect_s": 2, "first_byte_s": 20, "idle_s": 20, "total_s": 60},
            "pools": {"small": {"replicas": replicas}},
            "aliases": {"gpt-4o-mini": "small"},
            "store": {"url_env": None},
            "cache": {"response": {"enabled": False}},  # every request reaches the upstream, once
        },
    )
    results = tmp_path / "results"
    command = [sys.executable, str(REPO / "loadtests" / "run.py"), "--policy", str(policy), "--no-engine"]
    command += ["--port", str(free_port()), "--duration", "8s", "--users", "4", "--processes", "2"]
    command += [
        "--classes",
        "ChatUser",
        "StreamingUser",
        "--name",
        "distributed",
        "--results-dir",
        str(results),
    ]
    command += ["--stop-timeout", "10s", "--start-timeout", "60", "--max-tokens", "16"]
    command += ["--master-port", str(free_port())]  # never a port another run holds
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=150)
    output = done.stdout[-4000:] + done.stderr[-4000:]

    prefix = results / "distributed"
    assert done.returncode == 0, output
    assert read_failures(prefix) == [], output
    rows = read_stats(prefix)
    counts = {r.name: r.num_requests for r in rows if r.type == "POST"}
    workers = read_workers(prefix)
    assert len(workers) == 2 and all(n > 0 for n in workers.values()), (workers, output)
    assert sum(workers.values()) == sum(counts.values()) == len(upstream.requests), (workers, counts, output)
    assert counts.get("chat", 0) > 0 and counts.get("stream", 0) > 0, counts
    custom = {(r.type, r.name): r.num_requests for r in rows if r.type not in ("POST", "GET")}
    assert custom.get(("SSE", "ttft"), 0) == counts["stream"], custom  # the workers' custom rows too
    assert f"requests: {sum(counts.values()):,}," in done.stdout and "workers: 2 " in done.stdout, output
