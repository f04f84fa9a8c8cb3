"""Rollouts that lose nothing: SIGTERM to a real ``sortyard serve`` process.

The sequence (``gateway/cli/serve.py``): ``/readyz`` answers 503 ``draining`` at once while the process
still serves; connections are still taken for ``SORTYARD_DRAIN_DELAY_S``; then the port closes,
open streams finish up to ``SORTYARD_DRAIN_TIMEOUT_S`` (or are cut there), every request is settled
(its usage reaches the store, here a real Redis read after the process is gone), and the process
exits 0.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gateway.policy import load_policy
from gateway.stages.limits import month_of
from gateway.state_factories import build_store
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_process import GatewayProcess
from tools.servers.gateway_server import fake_policy, write_policy

pytestmark = pytest.mark.slow
SLOW = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "x"}]}  # 200 events, 10 s
NUM_STREAMS = 4


class _Stream(threading.Thread):
    """One slow stream read to its end (or until the connection is cut) in a thread."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.body = b""
        self.error: httpx.HTTPError | None = None
        self.has_first_chunk = threading.Event()

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/chat/completions", json=SLOW, timeout=60) as response:
                for chunk in response.iter_bytes():
                    self.body += chunk
                    self.has_first_chunk.set()
        except httpx.HTTPError as error:
            self.error = error
        finally:
            self.has_first_chunk.set()

    @property
    def is_whole(self) -> bool:
        return self.body.endswith(b"data: [DONE]\n\n") and all(
            f"t{i} ".encode() in self.body for i in range(200)
        )


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def _is_draining(url: str) -> bool:
    answer = httpx.get(url + "/readyz", timeout=5)  # a new connection each time
    return answer.status_code == 503 and answer.json() == {
        "status": "draining",
        "checks": {"accepting": False},
    }


def _start(
    tmp_path: Path, upstream: FakeUpstream, redis_url: str, *, delay_s: float, timeout_s: float
) -> tuple[GatewayProcess, Path]:
    document = fake_policy(upstream.base_url)
    document["timeouts"] = {"connect_s": 1, "first_byte_s": 5, "idle_s": 5, "total_s": 60}
    document["store"] = {"url_env": "SORTYARD_REDIS_URL"}  # the ledger outlives the process
    path = write_policy(tmp_path / "policy.yaml", document)
    env = {
        "SORTYARD_REDIS_URL": redis_url,
        "SORTYARD_DRAIN_DELAY_S": str(delay_s),
        "SORTYARD_DRAIN_TIMEOUT_S": str(timeout_s),
    }
    return GatewayProcess(path, env=env).wait_ready(), path


def _open_streams(url: str) -> list[_Stream]:
    streams = [_Stream(url) for _ in range(NUM_STREAMS)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.has_first_chunk.wait(10) and stream.error is None  # every stream is under way
    return streams


def _settled_requests(policy_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Requests in this month's ledger, read from Redis by a store of our own."""
    monkeypatch.setenv("SORTYARD_REDIS_URL", redis_url)  # the policy's store.url_env

    async def read() -> int:
        store = build_store(load_policy(str(policy_path)))
        try:
            report = await store.usage(month_of(time.time()))
        finally:
            await store.close()
        return sum(tenant.total.requests for tenant in report.tenants.values())

    return asyncio.run(read())


def test_sigterm_fails_readiness_at_once_and_lets_open_streams_finish(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, policy_path = _start(tmp_path, upstream, redis_flushed, delay_s=1.0, timeout_s=60)
    try:
        assert httpx.get(gateway.url + "/readyz", timeout=5).status_code == 200
        streams = _open_streams(gateway.url)
        gateway.terminate()
        _wait_for(lambda: _is_draining(gateway.url), timeout_s=5)  # still serving, out of rotation
        assert any(not s.is_whole for s in streams)  # ... while the streams are still open
        _wait_for(lambda: _refuses_connections(gateway.port), timeout_s=10)  # after the delay
        assert gateway.wait_exit(40) == 0
    finally:
        gateway.stop()
    for stream in streams:
        stream.join(10)
        assert stream.error is None and stream.is_whole  # nothing cut
    assert (
        _settled_requests(policy_path, redis_flushed, monkeypatch) == NUM_STREAMS
    )  # every one settled, batched writes flushed


def test_streams_longer_than_the_drain_deadline_are_cut_and_settled(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, policy_path = _start(tmp_path, upstream, redis_flushed, delay_s=0, timeout_s=1)
    cancelled_before = upstream.num_streams_cancelled
    try:
        streams = _open_streams(gateway.url)
        started = time.monotonic()
        gateway.terminate()
        assert gateway.wait_exit(20) == 0  # deadline, cut, settle: nothing hangs
        assert time.monotonic() - started < 9  # well before the streams' own end (10 s)
    finally:
        gateway.stop()
    for stream in streams:
        stream.join(10)
        assert not stream.is_alive() and not stream.is_whole  # cut at the deadline
    # the upstream calls were closed, and the cut requests still reached the ledger
    _wait_for(lambda: upstream.num_streams_cancelled >= cancelled_before + NUM_STREAMS, timeout_s=10)
    assert _settled_requests(policy_path, redis_flushed, monkeypatch) == NUM_STREAMS
