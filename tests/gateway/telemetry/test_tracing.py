"""Gateway traces: span tree, names, GenAI attributes, traceparent to the upstream, sampling."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.lifecycle import Observer
from gateway.policy.telemetry import TelemetryConfig, telemetry_of
from gateway.telemetry import semconv as gw
from gateway.telemetry.access_log import AccessLog
from gateway.telemetry.tracing import GatewayTracer
from sortyard.telemetry import semconv as sc
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

PARENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
SAMPLED_PARENT = f"00-{PARENT_TRACE}-b7ad6b7169203331-01"
UNSAMPLED_PARENT = f"00-{PARENT_TRACE}-b7ad6b7169203331-00"
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "secret prompt"}], "max_tokens": 5}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    path = write_policy(tmp_path_factory.mktemp("tracing") / "policy.yaml", fake_policy(upstream.base_url))
    server = GatewayServer(path).start()
    yield server
    server.stop()


class Traced:
    def __init__(self, exporter: InMemorySpanExporter, lines: list[bytes]) -> None:
        self.exporter = exporter
        self.lines = lines

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


def observe(gateway: GatewayServer, **env: str) -> Traced:
    exporter = InMemorySpanExporter()
    lines: list[bytes] = []
    gateway.app.observer = Observer(GatewayTracer(exporter, export_each=True), AccessLog(lines.append))
    gateway.compile_with(env)
    return Traced(exporter, lines)


def post(
    gateway: GatewayServer, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    """One request, returned once its span has ended and its access-log line is written (both happen
    after the response is sent)."""
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers or {}, timeout=10)
    gateway.settle()
    return response


def wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def test_a_sampled_request_makes_the_span_tree(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="1")
    response = post(gateway, {**CHAT, "temperature": 0.5, "stop": "x"})
    assert response.status_code == 200
    wait_for(lambda: any(s.kind is SpanKind.SERVER for s in traced.spans()))
    spans = by_name(traced.spans())
    server = spans["POST /v1/chat/completions"]
    client = spans["chat echo"]  # named by the replica's served model
    assert server.parent is None and server.kind is SpanKind.SERVER
    assert client.kind is SpanKind.CLIENT
    trace_ids = {s.context.trace_id for s in traced.spans()}
    assert len(trace_ids) == 1
    stages = [s for s in traced.spans() if s.name.startswith("sortyard.")]
    assert {"sortyard.route", "sortyard.limits"} <= {s.name for s in stages}
    assert all(s.parent is not None and s.parent.span_id == server.context.span_id for s in stages)
    upstream_stage = next(s for s in stages if client.parent and s.context.span_id == client.parent.span_id)
    assert upstream_stage.name == gw.stage_span_name("upstream")

    attrs = dict(server.attributes or {})
    assert attrs[sc.GEN_AI_OPERATION_NAME] == "chat"
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini"
    assert attrs["gen_ai.request.temperature"] == 0.5
    assert attrs["gen_ai.request.max_tokens"] == 5
    assert attrs["gen_ai.request.stop_sequences"] == ("x",)
    assert attrs[sc.HTTP_RESPONSE_STATUS_CODE] == 200
    assert attrs[gw.POOL] == "small"
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == 11
    client_attrs: dict[str, Any] = dict(client.attributes or {})
    assert client_attrs[gw.GEN_AI_PROVIDER_NAME] == "openai"
    assert client_attrs[sc.GEN_AI_REQUEST_MODEL] == "echo"
    assert client_attrs[sc.GEN_AI_RESPONSE_MODEL] == "echo"
    assert client_attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert client_attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert client_attrs[gw.SERVER_ADDRESS] == "127.0.0.1"
    # prompts stay out of spans unless the policy opts in
    assert not any(gw.GEN_AI_INPUT_MESSAGES in (s.attributes or {}) for s in traced.spans())
    # the upstream continues the CLIENT span
    sent = upstream.headers[-1]["traceparent"]
    assert sent[:-3] == f"00-{client.context.trace_id:032x}-{client.context.span_id:016x}"
    assert int(sent[-2:], 16) & 1  # sampled (0x02 is W3C level 2's "random trace id")
    # the access line names the trace
    assert f'"trace_id":"{server.context.trace_id:032x}"'.encode() in traced.lines[-1]


def test_a_sampled_caller_is_continued(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="0")  # the caller decides, not the ratio
    assert post(gateway, CHAT, {"traceparent": SAMPLED_PARENT, "tracestate": "k=v"}).status_code == 200
    wait_for(lambda: any(s.kind is SpanKind.SERVER for s in traced.spans()))
    server = by_name(traced.spans())["POST /v1/chat/completions"]
    assert f"{server.context.trace_id:032x}" == PARENT_TRACE
    assert server.parent is not None and server.parent.span_id == 0xB7AD6B7169203331
    assert upstream.headers[-1]["traceparent"].startswith(f"00-{PARENT_TRACE}-")
    assert upstream.headers[-1]["traceparent"] != SAMPLED_PARENT
    assert upstream.headers[-1]["tracestate"] == "k=v"


def test_an_unsampled_caller_passes_through_untouched(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="1")
    assert post(gateway, CHAT, {"traceparent": UNSAMPLED_PARENT}).status_code == 200
    assert upstream.headers[-1]["traceparent"] == UNSAMPLED_PARENT
    assert traced.spans() == []


def test_ratio_zero_traces_nothing(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="0")
    for _ in range(5):
        assert post(gateway, CHAT).status_code == 200
    assert "traceparent" not in upstream.headers[-1]
    assert traced.spans() == []
    assert len(traced.lines) == 5  # access logs are independent of sampling


def test_stream_client_span_ends_with_the_stream(gateway: GatewayServer) -> None:
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="1", SORTYARD_CAPTURE_CONTENT="1")
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=10) as response:
        assert response.status_code == 200
        text = b"".join(response.iter_bytes())
    assert text.endswith(b"data: [DONE]\n\n")
    wait_for(lambda: any(s.kind is SpanKind.SERVER for s in traced.spans()))
    spans = by_name(traced.spans())
    client = spans["chat echo"]
    server = spans["POST /v1/chat/completions"]
    assert client.end_time is not None and server.end_time is not None
    assert client.end_time <= server.end_time
    attrs: dict[str, Any] = dict(client.attributes or {})
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert "secret prompt" in str(attrs[gw.GEN_AI_INPUT_MESSAGES])  # opted in
    assert dict(server.attributes or {})[sc.IS_STREAM] is True


def test_failures_mark_the_spans(gateway: GatewayServer) -> None:
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="1")
    assert post(gateway, {**CHAT, "model": "fail"}).status_code == 502
    wait_for(lambda: any(s.kind is SpanKind.SERVER for s in traced.spans()))
    spans = by_name(traced.spans())
    server, client = spans["POST /v1/chat/completions"], spans["chat fail-500"]
    assert server.status.status_code.name == "ERROR"
    assert dict(server.attributes or {})[sc.ERROR_TYPE] == "upstream_error"
    assert client.status.status_code.name == "ERROR"
    # a client error is not a server failure
    traced = observe(gateway, SORTYARD_TRACE_SAMPLING_RATIO="1")
    assert post(gateway, {**CHAT, "model": "nope"}).status_code == 404
    wait_for(lambda: any(s.kind is SpanKind.SERVER for s in traced.spans()))
    server = by_name(traced.spans())["POST /v1/chat/completions"]
    assert server.status.status_code.name == "UNSET"
    assert dict(server.attributes or {})[sc.HTTP_RESPONSE_STATUS_CODE] == 404


# --- configuration -------------------------------------------------------------------------------
def test_off_without_an_exporter() -> None:
    """Which exporter the environment asks for: tests/sortyard/telemetry/test_exporter.py."""
    assert GatewayTracer.from_env({}).enabled is False
    assert GatewayTracer.from_env({"OTEL_TRACES_EXPORTER": "none"}).start_server({}, "x", 1.0, {}) is None


def test_telemetry_config_from_policy_and_env() -> None:
    class WithTelemetry:
        telemetry = TelemetryConfig(sampling_ratio=0.5, access_log=False)

    assert telemetry_of(object(), {}) == TelemetryConfig()
    assert telemetry_of(WithTelemetry(), {}).sampling_ratio == 0.5
    overridden = telemetry_of(
        WithTelemetry(), {"SORTYARD_ACCESS_LOG": "on", "SORTYARD_TRACE_SAMPLING_RATIO": "1"}
    )
    assert overridden.access_log is True and overridden.sampling_ratio == 1.0
    with pytest.raises(ValueError, match="SORTYARD_TRACE_SAMPLING_RATIO"):
        telemetry_of(object(), {"SORTYARD_TRACE_SAMPLING_RATIO": "2"})
    with pytest.raises(ValueError, match="SORTYARD_ACCESS_LOG"):
        telemetry_of(object(), {"SORTYARD_ACCESS_LOG": "maybe"})


def test_sampling_follows_the_ratio() -> None:
    tracer = GatewayTracer(InMemorySpanExporter())
    config = TelemetryConfig(sampling_ratio=0.25)
    sampled = sum(
        tracer.start_request({}, "POST", "/v1/chat/completions", config) is not None for _ in range(4000)
    )
    assert 800 <= sampled <= 1200
    assert tracer.start_request({}, "POST", "/", TelemetryConfig(sampling_ratio=0.0)) is None


def test_an_unsampled_request_costs_next_to_nothing() -> None:
    tracer = GatewayTracer(InMemorySpanExporter())
    config = TelemetryConfig(sampling_ratio=0.0)
    headers = {"content-type": "application/json"}
    n = 20_000
    started = time.perf_counter()
    for _ in range(n):
        tracer.start_request(headers, "POST", "/v1/chat/completions", config)
    per_call_us = (time.perf_counter() - started) / n * 1e6
    assert per_call_us < 5, per_call_us  # ~0.3 us here; the SDK's own non-recording span costs ~4 us
