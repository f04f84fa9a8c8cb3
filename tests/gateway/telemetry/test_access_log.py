"""Access logs: one JSON line per request, with who/what/how, never keys or prompts."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.lifecycle import Observer
from gateway.telemetry.access_log import LOGGER_NAME, AccessLog, BufferedSink, default_sink
from gateway.telemetry.tracing import GatewayTracer
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = "sk-test-access-log-key-0123456789"
PROMPT = "my very private prompt"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    document = fake_policy(upstream.base_url)
    # an event every 50 ms for 10 s: long enough for a client to leave in the middle
    document["pools"]["slowstream"] = {"replicas": [{"base_url": upstream.base_url, "model": "slow-stream"}]}
    path = write_policy(tmp_path_factory.mktemp("access") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


def capture(gateway: GatewayServer, **env: str) -> list[bytes]:
    lines: list[bytes] = []
    gateway.app.observer = Observer(GatewayTracer(None), AccessLog(lines.append))
    gateway.compile_with(env)
    return lines


def chat(gateway: GatewayServer, **extra: object) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}], **extra}
    headers = {"Authorization": f"Bearer {KEY}", "x-request-id": "req-42"}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)
    gateway.settle()  # the line is written when the request is over, after the response
    return response


def test_one_line_per_request_with_the_facts(gateway: GatewayServer) -> None:
    lines = capture(gateway)
    assert chat(gateway).status_code == 200
    [line] = lines
    entry = json.loads(line)
    assert entry["request_id"] == "req-42"
    assert entry["endpoint"] == "chat" and entry["model"] == "gpt-4o-mini"
    assert entry["tenant"] == "anonymous" and entry["pool"] == "small"
    assert entry["replica"].startswith("127.0.0.1:")
    assert entry["status"] == 200 and entry["input_tokens"] == 11 and entry["output_tokens"] > 0
    assert entry["latency_ms"] > 0 and entry["upstream_ms"] > 0
    assert "error" not in entry and "trace_id" not in entry
    assert KEY.encode() not in line and PROMPT.encode() not in line


def test_streams_log_when_they_end(gateway: GatewayServer) -> None:
    lines = capture(gateway)
    assert chat(gateway, stream=True).status_code == 200
    [line] = lines
    entry = json.loads(line)
    assert entry["stream"] is True and entry["ttft_ms"] > 0 and entry["output_tokens"] > 0
    assert PROMPT.encode() not in line


def test_a_stream_its_client_cut_is_logged_as_499(gateway: GatewayServer) -> None:
    lines = capture(gateway)
    body = {"model": "slowstream", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", gateway.url + "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        next(response.iter_lines())  # one event, then the client leaves
    gateway.settle()
    [line] = lines
    entry = json.loads(line)
    assert entry["status"] == 499 and entry["error"] == "client_closed_request" and entry["stream"] is True


def test_failures_are_logged_with_their_code(gateway: GatewayServer) -> None:
    lines = capture(gateway)
    assert chat(gateway, model="fail").status_code == 502
    assert (
        httpx.post(gateway.url + "/v1/chat/completions", content=b"{not json", timeout=5).status_code == 400
    )
    gateway.settle()
    first, second = (json.loads(line) for line in lines)
    assert first["status"] == 502 and first["error"] == "upstream_error" and first["pool"] == "fail"
    assert second["status"] == 400 and "model" not in second and second["error"]


def test_access_log_can_be_switched_off(gateway: GatewayServer) -> None:
    lines = capture(gateway, SORTYARD_ACCESS_LOG="0")
    assert chat(gateway).status_code == 200
    assert lines == []


def test_buffered_sink_flushes_by_count_and_age() -> None:
    stream = io.BytesIO()
    sink = BufferedSink(stream, max_lines=3, max_age_s=60)
    sink(b"a")
    sink(b"b")
    assert stream.getvalue() == b""
    sink(b"c")
    assert stream.getvalue() == b"a\nb\nc\n"
    aged = BufferedSink(io.BytesIO(), max_lines=100, max_age_s=0.05)
    aged(b"x")
    deadline = time.monotonic() + 10  # the background flush writes it without another line
    while aged.stream.getvalue() == b"" and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)
    assert aged.stream.getvalue() == b"x\n"  # type: ignore[attr-defined]


def test_a_configured_logger_gets_the_lines() -> None:
    logger = logging.getLogger(LOGGER_NAME)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        default_sink()(b'{"status":200}')
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == ['{"status":200}']
