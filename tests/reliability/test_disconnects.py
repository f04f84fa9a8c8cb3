"""A client that leaves is propagated: the upstream request is aborted, plain or streamed, and the
request's after-response work (releasing the replica, settling limits) runs once."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import pytest

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def _send_request(gateway: GatewayServer, path: str, body: dict[str, object]) -> socket.socket:
    """A raw HTTP request on its own socket (closing it is a client leaving, nothing else)."""
    raw = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )
    return sock


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_a_plain_request_whose_client_leaves_is_aborted_upstream(
    gateway: GatewayServer, upstream: FakeUpstream, endpoint: str
) -> None:
    # "hang" never answers and its pool's timeouts are 600 s: an abort within the wait below can only be
    # the client's departure reaching the upstream
    before_abandoned, before_requests = upstream.num_hangs_abandoned, len(upstream.requests)
    sock = _send_request(
        gateway, endpoint, {"model": "hang", "messages": [{"role": "user", "content": "x"}], "prompt": "x"}
    )
    _wait_for(lambda: len(upstream.requests) > before_requests)
    sock.close()
    _wait_for(lambda: upstream.num_hangs_abandoned > before_abandoned)
    assert upstream.num_hangs_abandoned == before_abandoned + 1
    gateway.settle()
    assert all(s.outstanding == 0 for s in gateway.gateway.balancer.all_replicas())
