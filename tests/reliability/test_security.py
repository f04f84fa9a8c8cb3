"""The security review (docs/security.md), one test per point."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.keys.hashing import KeyIndex, hash_key, key_stanza, new_key
from gateway.lifecycle import Observer
from gateway.policy import PolicyError, parse_policy
from gateway.telemetry.access_log import AccessLog
from gateway.telemetry.tracing import GatewayTracer
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

USER, ADMIN = new_key(), new_key()
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    document = fake_policy(upstream.base_url)
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(USER), "tenant": "acme", "name": "user"},
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
    ]
    document["limits"] = {"max_body_bytes": 4096}
    path: Path = write_policy(tmp_path_factory.mktemp("security") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_never_reach_logs_access_logs_spans_or_metrics(
    guarded: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    exporter = InMemorySpanExporter()
    lines: list[bytes] = []
    guarded.app.observer = Observer(GatewayTracer(exporter, export_each=True), AccessLog(lines.append))
    guarded.compile_with({"SORTYARD_TRACE_SAMPLING_RATIO": "1", "SORTYARD_CAPTURE_CONTENT": "1"})
    wrong = "sk-not-a-key-" + "z" * 20
    for key, model in ((USER, "small"), (USER, "fail"), (wrong, "small")):
        httpx.post(guarded.url + "/v1/chat/completions", json={**CHAT, "model": model}, headers=_auth(key))
    guarded.settle()
    spans = " ".join(str(dict(s.attributes or {})) + s.name for s in exporter.get_finished_spans())
    seen = caplog.text + b"".join(lines).decode() + spans + httpx.get(guarded.url + "/metrics").text
    assert exporter.get_finished_spans() and lines  # the sinks did see the requests
    for secret in (USER, wrong, hash_key(USER)):
        assert secret not in seen


def test_keys_are_kept_and_compared_only_as_sha256_digests() -> None:
    """The policy and the index hold digests only; a lookup hashes the presented key first, so the
    comparison that follows (a dict lookup on digests) reveals nothing usable about any key's bytes."""
    stanza = key_stanza(USER, tenant="acme")
    assert USER not in stanza and hash_key(USER) in stanza
    policy = parse_policy(
        {
            "pools": {"s": {"replicas": [{"base_url": "http://x", "model": "m"}]}},
            "keys": [{"sha256": hash_key(USER), "tenant": "acme"}],
        },
        "t",
    )
    index = KeyIndex(policy)
    assert USER not in repr(index.by_hash) and index.lookup(USER) is not None
    assert index.lookup(USER[:-1] + ("A" if USER[-1] != "A" else "B")) is None


@pytest.mark.parametrize(
    "header_line",
    [b"x-request-id: ok\r\nx-injected: 1", b"x-request-id: a\rx-injected: 1"],
    ids=["crlf", "bare cr"],
)
def test_no_header_can_be_injected_through_request_ids_or_model_names(
    guarded: GatewayServer, header_line: bytes
) -> None:
    body = b'{"model": "small\\r\\nx-injected: 1", "messages": [{"role": "user", "content": "hi"}]}'
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Authorization: Bearer {USER}\r\n".encode()
            + header_line
            + b"\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        sock.settimeout(30)
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    head = response.partition(b"\r\n\r\n")[0].lower()
    assert b"\r\nx-injected" not in head


def test_clients_cannot_choose_the_upstream(guarded: GatewayServer, upstream: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=guarded.url + "/v1", api_key=USER, max_retries=0)
    with pytest.raises(openai.NotFoundError):  # a URL is not a model: pools come from the policy only
        client.chat.completions.create(model="http://169.254.169.254/latest", messages=CHAT["messages"])  # type: ignore[arg-type]
    before = len(upstream.requests)
    client.chat.completions.create(
        model="small",
        messages=CHAT["messages"],  # type: ignore[arg-type]
        extra_body={"base_url": "http://169.254.169.254/", "api_base": "http://169.254.169.254/"},
    )
    assert len(upstream.requests) == before + 1  # it went to the policy's replica, fields and all


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://x", "ftp://x/v1", "http://", "/v1"])
def test_policy_urls_must_be_http(url: str) -> None:
    with pytest.raises(PolicyError, match="expected an http"):
        parse_policy({"pools": {"s": {"replicas": [{"base_url": url, "model": "m"}]}}}, "t")


def test_unauthenticated_requests_are_bounded_in_size(guarded: GatewayServer) -> None:
    big = {**CHAT, "padding": "x" * 10_000}  # over the policy's 4,096 bytes
    assert httpx.post(guarded.url + "/v1/chat/completions", json=big, headers=_auth(USER)).status_code == 413
    assert httpx.post(guarded.url + "/v1/chat/completions", json=big).status_code == 401  # the key first
    assert httpx.post(guarded.url + "/v1/chat/completions", json=CHAT).status_code == 401
    assert httpx.post(guarded.url + "/v1/nope", content=b"x" * 100_000).status_code == 404


@pytest.mark.parametrize("framing", [b"Content-Length: 60000000", b"Transfer-Encoding: chunked"])
def test_a_request_without_a_key_is_refused_before_its_body_is_read(
    guarded: GatewayServer, framing: bytes
) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n" + framing + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", guarded.port), timeout=10) as conn:
        conn.sendall(head)  # not one byte of the body: the answer must not wait for it
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            reply += chunk
        assert conn.recv(1) == b""  # then the connection closes: the rest of the upload is not wanted
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert b"connection: close" in reply.lower() and b'"invalid_api_key"' in reply


def test_admin_endpoints_refuse_other_keys(guarded: GatewayServer) -> None:
    assert httpx.get(guarded.url + "/v1/usage").status_code == 401
    refused = httpx.get(guarded.url + "/v1/usage", headers=_auth(USER))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_key_required"
    assert httpx.get(guarded.url + "/v1/usage", headers=_auth(ADMIN)).status_code == 200
