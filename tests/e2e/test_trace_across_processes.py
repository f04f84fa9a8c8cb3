"""One trace across two processes: client -> gateway (subprocess) -> reference engine (subprocess).

Each process writes its finished spans as JSON lines (``SORTYARD_TEST_SPAN_FILE``, the test-only
exporter); the test joins them and checks the tree, the names, the attributes and the one trace id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.telemetry import semconv as gateway_sc
from sortyard.telemetry import semconv as sc
from tests.backends.engine.tiny import build_tiny_model
from tests.support.readiness import wait_until_ok
from tools.servers.gateway_server import write_policy
from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_one_trace_through_gateway_and_engine(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "tiny", "gqa")
    engine_port, gateway_port = free_port(), free_port()
    engine_spans, gateway_spans = tmp_path / "engine.jsonl", tmp_path / "gateway.jsonl"
    policy = write_policy(
        tmp_path / "policy.yaml",
        {
            "version": 1,
            "pools": {
                "small": {"replicas": [{"base_url": f"http://127.0.0.1:{engine_port}/v1", "model": "tiny"}]}
            },
            "aliases": {"gpt-4o-mini": "small"},
            "auth": {"required": False},
            "store": {"url_env": None},
        },
    )
    common = {"SORTYARD_ACCESS_LOG": "0", "OTEL_TRACES_EXPORTER": "none"}
    engine = _start(
        ["-m", "backends.server", "--model", str(model_dir), "--served-model-name", "tiny",
         "--port", str(engine_port), "--max-model-len", "256", "--kv-cache-bytes", str(4 << 20),
         "--num-threads", "1", "--embedding-model", "none", "--log-level", "warning"],
        {**common, "SORTYARD_TEST_SPAN_FILE": str(engine_spans), "SORTYARD_TRACE_SAMPLING_RATIO": "0"},
    )  # fmt: skip
    gateway = _start(
        [
            "-m",
            "gateway",
            "serve",
            "--policy",
            str(policy),
            "--port",
            str(gateway_port),
            "--log-level",
            "warning",
        ],
        {**common, "SORTYARD_TEST_SPAN_FILE": str(gateway_spans), "SORTYARD_TRACE_SAMPLING_RATIO": "1"},
    )
    try:
        wait_until_ok(f"http://127.0.0.1:{engine_port}/ready", engine, 120)
        wait_until_ok(f"http://127.0.0.1:{gateway_port}/healthz", gateway, 60)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="unused", max_retries=0, timeout=60
        )
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"},
        )
        chunks = list(stream)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            gw, en = _spans(gateway_spans), _spans(engine_spans)
            if any(s["kind"] == "SERVER" for s in gw) and any(s["kind"] == "SERVER" for s in en):
                break
            time.sleep(0.1)
    finally:
        for proc in (gateway, engine):
            proc.terminate()
        for proc in (gateway, engine):
            proc.wait(20)

    gw, en = _spans(gateway_spans), _spans(engine_spans)
    assert {s["trace_id"] for s in gw + en} == {CALLER_TRACE}  # one trace across both processes
    assert {s["service"] for s in gw} == {"sortyard-gateway"}
    assert {s["service"] for s in en} == {"sortyard-engine"}
    by_id = {s["span_id"]: s for s in gw + en}

    def parent(span: dict[str, Any]) -> dict[str, Any] | None:
        return by_id.get(span["parent_span_id"] or "")

    # gateway: SERVER (child of the caller) -> stages -> CLIENT `chat tiny`
    [gw_server] = [s for s in gw if s["kind"] == "SERVER"]
    assert gw_server["name"] == "POST /v1/chat/completions"
    assert gw_server["parent_span_id"] == "00f067aa0ba902b7"
    assert gw_server["attributes"][sc.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert gw_server["attributes"][sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    stages = [s for s in gw if s["name"].startswith("sortyard.")]
    assert stages and all(parent(s) is gw_server for s in stages)
    [gw_client] = [s for s in gw if s["kind"] == "CLIENT"]
    assert gw_client["name"] == "chat tiny"
    assert parent(gw_client) in stages
    attrs = gw_client["attributes"]
    assert attrs[sc.GEN_AI_OPERATION_NAME] == "chat"
    assert attrs[gateway_sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == "tiny"
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0 and attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS]

    # engine: SERVER (child of the gateway's CLIENT span) -> queue wait, prefill, decode, in order
    [en_server] = [s for s in en if s["kind"] == "SERVER"]
    assert parent(en_server) is gw_client
    assert en_server["attributes"][sc.GEN_AI_REQUEST_MODEL] == "tiny"
    assert en_server["attributes"][sc.GEN_AI_USAGE_OUTPUT_TOKENS] == attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS]
    assert en_server["attributes"]["gen_ai.request.max_tokens"] == 8
    phases = {s["name"]: s for s in en if parent(s) is en_server}
    assert set(phases) == {sc.ENGINE_QUEUE_SPAN, sc.ENGINE_PREFILL_SPAN, sc.ENGINE_DECODE_SPAN}
    queue, prefill, decode = (
        phases[n] for n in (sc.ENGINE_QUEUE_SPAN, sc.ENGINE_PREFILL_SPAN, sc.ENGINE_DECODE_SPAN)
    )
    assert queue["start_ns"] <= queue["end_ns"] <= prefill["start_ns"] + 1
    assert {s["attributes"][sc.ENGINE_TIMING] for s in phases.values()} == {"engine"}  # measured
    assert prefill["end_ns"] <= decode["start_ns"] + 1 and decode["start_ns"] <= decode["end_ns"]
    assert en_server["start_ns"] <= queue["start_ns"] and decode["end_ns"] <= en_server["end_ns"]
    # the engine's work sits inside the gateway's CLIENT span
    assert gw_client["start_ns"] <= en_server["start_ns"] and en_server["end_ns"] <= gw_client["end_ns"]
