"""sortyard/telemetry/exporter.py: the exporter the ``OTEL_*`` variables choose, the test file exporter's
lines, and the tracer provider both processes build the same way."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import SpanKind, StatusCode

from sortyard.telemetry.exporter import JsonLinesSpanExporter, exporter_from_env, span_record, tracer_provider

OTLP = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


def test_tracing_is_off_by_default_and_with_none() -> None:
    assert exporter_from_env({}) == (None, False)
    assert exporter_from_env({"OTEL_TRACES_EXPORTER": "none"}) == (None, False)
    assert exporter_from_env({"OTEL_TRACES_EXPORTER": " None , otlp"}) == (None, False)  # the first wins


def test_console_and_otlp() -> None:
    console, each = exporter_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert isinstance(console, ConsoleSpanExporter) and not each
    otlp, each = exporter_from_env(OTLP)
    assert isinstance(otlp, OTLPSpanExporter) and not each


def test_the_sdk_switch_turns_everything_off() -> None:
    assert exporter_from_env({**OTLP, "OTEL_SDK_DISABLED": "TRUE "}) == (None, False)
    otlp, _ = exporter_from_env({**OTLP, "OTEL_SDK_DISABLED": "false"})
    assert isinstance(otlp, OTLPSpanExporter)


def test_an_unknown_exporter_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "sortyard.tracing"):
        assert exporter_from_env({"OTEL_TRACES_EXPORTER": "zipkin"}) == (None, False)
        exporter, _ = exporter_from_env({"OTEL_TRACES_EXPORTER": "zipkin,console"})
    assert isinstance(exporter, ConsoleSpanExporter)
    assert "OTEL_TRACES_EXPORTER=zipkin is not supported" in caplog.text


def test_otlp_protocols(caplog: pytest.LogCaptureFixture) -> None:
    json_protocol, _ = exporter_from_env({**OTLP, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    assert isinstance(json_protocol, OTLPSpanExporter)
    with caplog.at_level(logging.WARNING, "sortyard.tracing"):
        odd, _ = exporter_from_env({**OTLP, "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"})
    assert isinstance(odd, OTLPSpanExporter) and "using http/protobuf" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR, "sortyard.tracing"):
        grpc, _ = exporter_from_env({**OTLP, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    try:
        import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401
    except ImportError:
        assert grpc is None and "opentelemetry-exporter-otlp-proto-grpc" in caplog.text
    else:
        assert grpc is not None


def test_the_test_span_file_comes_first_and_exports_each_span(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter, each = exporter_from_env(
        {**OTLP, "OTEL_SDK_DISABLED": "true", "SORTYARD_TEST_SPAN_FILE": str(path)}
    )
    assert isinstance(exporter, JsonLinesSpanExporter) and exporter.path == str(path) and each


def test_the_span_file_gets_one_json_line_per_span(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = tracer_provider(
        JsonLinesSpanExporter(str(path)),
        service_name="svc",
        sampler=ALWAYS_ON,
        id_generator=RandomIdGenerator(),
        export_each=True,
    )
    tracer = provider.get_tracer("t")
    parent = tracer.start_span("parent", kind=SpanKind.SERVER, attributes={"a": 1})
    child = tracer.start_span("child", context=trace.set_span_in_context(parent))
    child.end()
    parent.end()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert (first["name"], second["name"]) == ("child", "parent")
    assert first["parent_span_id"] == second["span_id"] and second["parent_span_id"] is None
    assert first["trace_id"] == second["trace_id"] and len(first["trace_id"]) == 32
    assert len(second["span_id"]) == 16
    assert second["kind"] == "SERVER" and second["attributes"] == {"a": 1}
    assert second["status"] == "UNSET" and second["service"] == "svc"
    assert second["start_ns"] <= first["start_ns"] <= first["end_ns"] <= second["end_ns"]
    provider.shutdown()


def test_span_record_of_a_failed_span() -> None:
    exporter = InMemorySpanExporter()
    provider = tracer_provider(
        exporter, service_name="svc", sampler=ALWAYS_ON, id_generator=RandomIdGenerator(), export_each=True
    )
    span = provider.get_tracer("t").start_span("x")
    span.set_status(StatusCode.ERROR)
    span.end()
    [finished] = exporter.get_finished_spans()
    record = span_record(finished)
    assert record["status"] == "ERROR" and record["kind"] == "INTERNAL"
    assert record["span_id"] == f"{span.get_span_context().span_id:016x}"


def test_the_provider_names_the_service_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def service() -> object:
        provider = tracer_provider(
            InMemorySpanExporter(),
            service_name="fallback",
            sampler=ALWAYS_ON,
            id_generator=RandomIdGenerator(),
        )
        return provider.resource.attributes["service.name"]

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert service() == "fallback"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    assert service() == "from-env"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "")
    assert service() == "fallback"


def test_the_provider_batches_unless_told_to_export_each() -> None:
    batched = InMemorySpanExporter()
    provider = tracer_provider(batched, service_name="s", sampler=ALWAYS_ON, id_generator=RandomIdGenerator())
    provider.get_tracer("t").start_span("x").end()
    assert batched.get_finished_spans() == ()  # waiting for its batch
    provider.force_flush()
    assert [s.name for s in batched.get_finished_spans()] == ["x"]
    provider.shutdown()

    each = InMemorySpanExporter()
    provider = tracer_provider(
        each, service_name="s", sampler=ALWAYS_ON, id_generator=RandomIdGenerator(), export_each=True
    )
    provider.get_tracer("t").start_span("y").end()
    assert [s.name for s in each.get_finished_spans()] == ["y"]
    provider.shutdown()


def test_the_provider_uses_the_sampler_and_id_generator_given() -> None:
    class FixedIds(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            return 42

    exporter = InMemorySpanExporter()
    on = tracer_provider(
        exporter, service_name="s", sampler=ALWAYS_ON, id_generator=FixedIds(), export_each=True
    )
    span = on.get_tracer("t").start_span("x")
    assert span.get_span_context().trace_id == 42
    off = tracer_provider(
        exporter, service_name="s", sampler=ALWAYS_OFF, id_generator=FixedIds(), export_each=True
    )
    assert not off.get_tracer("t").start_span("y").is_recording()
