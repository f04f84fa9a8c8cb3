"""gateway/telemetry/multiprocess.py: several worker processes answer /metrics with the whole server's
counts, from the directory the parent prepared."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway.telemetry.multiprocess import MULTIPROC_ENV, is_multiprocess, prepare_multiprocess
from tests.gateway.telemetry.test_metrics import CHAT, requests_total
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import fake_policy, write_policy
from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Path:
    return write_policy(tmp_path_factory.mktemp("mp") / "policy.yaml", fake_policy(upstream.base_url))


def test_prepare_multiprocess_empties_and_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MULTIPROC_ENV, "")  # restored after the test
    stale = tmp_path / "prom"
    stale.mkdir()
    (stale / "counter_1.db").write_bytes(b"old")
    assert not is_multiprocess()
    prepare_multiprocess(stale)
    assert os.environ[MULTIPROC_ENV] == str(stale) and list(stale.iterdir()) == []
    assert is_multiprocess()


def _serve_workers(policy_path: Path, multiproc_dir: Path, port: int) -> subprocess.Popen[bytes]:
    # what `sortyard serve --workers 2` does once the CLI calls prepare_multiprocess
    env = {
        **os.environ,
        "SORTYARD_POLICY_PATH": str(policy_path),
        "SORTYARD_ACCESS_LOG": "0",
        MULTIPROC_ENV: str(multiproc_dir),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "gateway.app:create_app", "--factory", "--workers", "2",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("gateway workers did not start")


@pytest.mark.slow
def test_two_workers_report_the_whole_server(policy_path: Path, tmp_path: Path) -> None:
    multiproc_dir = tmp_path / "prom"
    multiproc_dir.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve_workers(policy_path, multiproc_dir, port)
    try:
        _wait_ready(url, proc)
        num_requests = 40

        def one(_: int) -> int:
            return httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10).status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(one, range(num_requests))) == {200}
        # the last requests are counted by their finishers, after their responses: wait for that
        deadline = time.monotonic() + 10
        while requests_total(httpx.get(url + "/metrics", timeout=5).text, "small") < num_requests:
            assert time.monotonic() < deadline, "the workers never counted every request"
            time.sleep(0.05)
        pids = {p.name.rsplit("_", 1)[-1] for p in multiproc_dir.glob("counter_*.db")}
        for _ in range(6):  # whichever worker answers the scrape, it reports every worker's counts
            text = httpx.get(url + "/metrics", timeout=5).text
            assert requests_total(text, "small") == num_requests
            assert "sortyard_request_duration_seconds_bucket" in text
        assert pids  # the values live in the shared directory
    finally:
        proc.terminate()
        proc.wait(15)
