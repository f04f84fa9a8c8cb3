"""Graceful shutdown: the gateway stops taking connections and lets open streams finish (their
after-response work included), up to ``drain_timeout_s``; past it, what is left is cut and still
settled."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway_server import GatewayServer, fake_policy, write_policy

pytestmark = pytest.mark.slow
SLOW = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "x"}]}  # 200 events, 10 s


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _gateway(tmp_path: Path, upstream: FakeUpstream, drain_timeout_s: float) -> GatewayServer:
    document = fake_policy(upstream.base_url)
    document["timeouts"] = {"connect_s": 1, "first_byte_s": 5, "idle_s": 5, "total_s": 60}
    path = write_policy(tmp_path / "policy.yaml", document)
    return GatewayServer(path, settings={"drain_timeout_s": drain_timeout_s}).start()


def test_shutdown_lets_an_open_stream_finish(tmp_path: Path, upstream: FakeUpstream) -> None:
    gateway = _gateway(tmp_path, upstream, drain_timeout_s=60)
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", gateway.url + "/v1/chat/completions", json=SLOW) as response,
    ):
        chunks = response.iter_bytes()
        received = next(chunks)
        stopping = threading.Thread(target=gateway.stop)
        stopping.start()  # SIGTERM's path: uvicorn stops listening, then waits for open requests
        _wait_for(lambda: _refuses_connections(gateway.port))
        received += b"".join(chunks)
    stopping.join(30)
    assert not stopping.is_alive()
    assert received.endswith(b"data: [DONE]\n\n")
    assert all(f"t{i} ".encode() in received for i in range(200))  # nothing cut
    assert gateway.gateway.inflight.num_open == 0  # its after-response work ran too


def test_a_stream_longer_than_the_drain_deadline_is_cut_and_settled(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    gateway = _gateway(tmp_path, upstream, drain_timeout_s=0.5)
    cancelled_before = upstream.num_streams_cancelled
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", gateway.url + "/v1/chat/completions", json=SLOW) as response,
    ):
        chunks = response.iter_bytes()
        next(chunks)
        gateway.stop()
        with pytest.raises(httpx.HTTPError):  # the connection closes before the stream's end
            for _ in chunks:
                pass
    _wait_for(lambda: upstream.num_streams_cancelled > cancelled_before)  # the upstream call was closed
    assert gateway.gateway.inflight.num_open == 0
