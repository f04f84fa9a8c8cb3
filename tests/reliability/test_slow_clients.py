"""Slow clients are cut off on stated bounds: headers (``header_read_timeout_s``) and body
(``body_read_timeout_s``) each get an OpenAI-shaped 408 and the connection is closed, so a few hundred
slowloris clients cannot hold a worker's sockets for as long as they like."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    path: Path = write_policy(tmp_path_factory.mktemp("slow") / "policy.yaml", fake_policy(upstream.base_url))
    server = GatewayServer(
        path, settings={"header_read_timeout_s": TIMEOUT_S, "body_read_timeout_s": TIMEOUT_S}
    ).start()
    yield server
    server.stop()


def _answer_then_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the test's bound: 30 s)."""
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _error(response: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


@pytest.mark.parametrize(
    "partial",
    [b"", b"POST /v1/chat/completions HTTP/1.1\r\n", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"],
    ids=["nothing", "request line", "some headers"],
)
def test_headers_that_never_finish_get_408_and_the_connection_closes(
    strict: GatewayServer, partial: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        sock.sendall(partial)
        status, error = _error(_answer_then_close(sock))
    assert status == 408 and error["code"] == "request_timeout" and error["type"] == "invalid_request_error"


def test_a_body_that_never_finishes_gets_408_and_the_connection_closes(strict: GatewayServer) -> None:
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model":'
        )
        response = _answer_then_close(sock)
    status, error = _error(response)
    assert status == 408 and error["code"] == "request_timeout" and "body" in str(error["message"])


def test_a_kept_alive_connection_gets_the_same_deadline_for_its_next_request(strict: GatewayServer) -> None:
    body = b'{"model": "small", "messages": [{"role": "user", "content": "hi"}]}'
    with socket.create_connection(("127.0.0.1", strict.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        sock.settimeout(30)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHo")  # ...and stalls
        rest = _answer_then_close(sock)
    status, error = _error(rest[rest.index(b"HTTP/1.1 408") :])
    assert status == 408 and error["code"] == "request_timeout"


def test_a_prompt_client_is_not_cut(strict: GatewayServer) -> None:
    import httpx

    response = httpx.post(
        strict.url + "/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert response.status_code == 200
