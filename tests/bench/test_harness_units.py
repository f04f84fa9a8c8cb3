"""Unit tests of the overhead harness's pure parts: wrk output, nginx config, specs, the report."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from harness.errors import BenchError, WrkError
from harness.measure import Point
from harness.nginx import (
    JSON_BODIES,
    JSON_BODY,
    LONG_JSON_BODY,
    SSE_BODY,
    render_nginx_conf,
    return_directives,
)
from harness.report import (
    GOAL_SETS,
    Goals,
    check_goals,
    check_within,
    markdown_table,
    noise_notes,
    summarize,
    to_json,
)
from harness.targets import HARNESS_DIR, POLICY_TEMPLATE, Target, fill, parse_gateway_spec, probe
from harness.wrk import WrkResult, parse_wrk_output

WRK_STDOUT = """Running 1s test @ http://127.0.0.1:1/v1/chat/completions
  1 threads and 16 connections
  Latency Distribution
     50%  191.00us
BENCH_WRK_RESULT {"requests":5000,"duration_us":2000000,"bytes":100,"errors":{"connect":0,"read":0,"write":0,\
"status":3,"timeout":0},"latency_us":{"mean":191.60,"max":1553,"p50":190,"p75":206,"p90":219,"p99":2810}}
Requests/sec:  2500.00
"""


def test_parse_wrk_output_reads_the_done_line() -> None:
    result = parse_wrk_output(WRK_STDOUT)
    assert result.num_requests == 5000
    assert result.requests_per_s == pytest.approx(2500.0)
    assert result.p50_ms == pytest.approx(0.190)
    assert result.p99_ms == pytest.approx(2.810)
    assert result.errors["status"] == 3
    assert result.num_errors == 3


def test_parse_wrk_output_without_result_line_fails_loudly() -> None:
    with pytest.raises(WrkError, match="BENCH_WRK_RESULT"):
        parse_wrk_output("Running 1s test\nRequests/sec: 10\n")


def test_canned_bodies_are_openai_shaped() -> None:
    completion = json.loads(JSON_BODY.read_text())
    assert completion["object"] == "chat.completion"
    assert completion["usage"]["total_tokens"] > 0
    events = [e for e in SSE_BODY.read_text().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert sum(1 for c in chunks if c["choices"]) == 20
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 20


def test_return_directives_split_long_bodies_under_nginx_token_limit() -> None:
    body = "data: {'x'}\n\n" * 1000
    text = return_directives("b", body)
    sets = [line for line in text.splitlines() if line.strip().startswith("set ")]
    assert len(sets) > 1
    assert all(len(line) < 4096 for line in sets)
    assert text.splitlines()[-1].strip().startswith('return 200 "${b_0}${b_1}')
    with pytest.raises(ValueError):
        return_directives("b", "costs $5")


def test_render_nginx_conf_fills_every_slot(tmp_path: Path) -> None:
    conf = render_nginx_conf(tmp_path, 12345)
    assert "{{" not in conf
    assert "listen 127.0.0.1:12345" in conf
    assert str(tmp_path / "nginx.pid") in conf


def test_the_long_canned_body_is_openai_shaped_and_over_the_compression_threshold() -> None:
    assert JSON_BODIES == {"short": JSON_BODY, "long": LONG_JSON_BODY}
    text = LONG_JSON_BODY.read_text().strip()
    completion = json.loads(text)
    assert completion["object"] == "chat.completion" and completion["usage"]["completion_tokens"] > 0
    assert 1024 < len(text.encode()) < 4096 and "$" not in text
    assert len(JSON_BODY.read_text().strip().encode()) < 1024


def test_render_nginx_conf_serves_the_chosen_plain_body(tmp_path: Path) -> None:
    assert "chatcmpl-bench0001" in render_nginx_conf(tmp_path, 1)
    conf = render_nginx_conf(tmp_path, 1, LONG_JSON_BODY)
    assert "chatcmpl-bench0002" in conf and "chatcmpl-bench0001" not in conf
    assert all(len(line) < 4096 for line in conf.splitlines())


@pytest.mark.parametrize(
    ("name", "enabled"), [("policy.yaml.tmpl", False), ("policy-compression.yaml.tmpl", True)]
)
def test_the_compression_policy_template_differs_from_the_bench_policy_only_there(
    tmp_path: Path, name: str, enabled: bool
) -> None:
    from gateway.policy import load_policy

    path = tmp_path / "bench.yaml"
    path.write_text(
        fill((HARNESS_DIR / name).read_text(), {"NGINX_PORT": "8080", "API_KEY_SHA256": "0" * 64})
    )
    policy = load_policy(path)
    assert policy.compression.enabled is enabled and policy.compression.min_size_bytes == 1024
    assert set(policy.pools) == {"bench", "bench-sse"} and len(policy.keys) == 1


class _Canned(BaseHTTPRequestHandler):
    """Answers like the canned upstream: the short JSON body (gzip when asked), the SSE body."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/sse"):
            body, headers = SSE_BODY.read_bytes(), {"Content-Type": "text/event-stream"}
        else:
            body, headers = JSON_BODY.read_bytes(), {"Content-Type": "application/json"}
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        self.send_response(200)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def canned_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_probe_reports_how_an_accept_encoding_request_came_back(
    canned_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = Target("gw", "gateway", canned_url + "/json", canned_url + "/sse", _FakeProcess())  # type: ignore[arg-type]
    probe(target, "sk")
    assert capsys.readouterr().err == ""
    probe(target, "sk", "gzip")
    err = capsys.readouterr().err
    assert "Accept-Encoding 'gzip': Content-Encoding gzip" in err
    assert f"of {len(JSON_BODY.read_bytes()):,} bytes" in err


def test_parse_gateway_spec(tmp_path: Path) -> None:
    policy = tmp_path / "keys.yaml"
    policy.write_text("version: 1\n")
    config = parse_gateway_spec(f"with-keys={policy},SORTYARD_REDIS_URL=${{REDIS_URL}},A=b=c")
    assert config.label == "with-keys"
    assert config.policy_template == policy
    assert dict(config.env) == {"SORTYARD_REDIS_URL": "${REDIS_URL}", "A": "b=c"}
    assert parse_gateway_spec(str(policy)).label == "gateway (keys)"
    with pytest.raises(BenchError):
        parse_gateway_spec(str(tmp_path / "missing.yaml"))
    with pytest.raises(BenchError):
        parse_gateway_spec(f"{policy},NOEQUALS")


def test_policy_template_fills_and_loads_as_a_gateway_policy(tmp_path: Path) -> None:
    from gateway.policy import load_policy

    sha256 = hashlib.sha256(b"sk-sy-bench").hexdigest()
    text = fill(POLICY_TEMPLATE.read_text(), {"NGINX_PORT": "8080", "API_KEY_SHA256": sha256})
    assert "${" not in text
    path = tmp_path / "bench.yaml"
    path.write_text(text)
    policy = load_policy(path)
    assert policy.pool_for_model("bench") == "bench"
    assert policy.pools["bench-sse"].replicas[0].base_url == "http://127.0.0.1:8080/sse/v1"
    assert [key.sha256 for key in policy.keys] == [sha256]


def test_fill_keeps_other_dollars() -> None:
    assert fill("a $HOME ${X} ${Y}", {"Y": "y"}) == "a $HOME ${X} y"


def _result(rps: float, p50_ms: float) -> WrkResult:
    return WrkResult(
        num_requests=int(rps),
        duration_s=1.0,
        requests_per_s=rps,
        mean_ms=p50_ms,
        p50_ms=p50_ms,
        p75_ms=p50_ms,
        p90_ms=p50_ms,
        p99_ms=p50_ms * 3,
        max_ms=p50_ms * 5,
        num_bytes=0,
        errors={"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0},
    )


class _FakeProcess:
    pass


def test_summarize_takes_medians_and_the_added_p50() -> None:
    targets = [
        Target("nginx direct", "direct", "u", "u", _FakeProcess()),  # type: ignore[arg-type]
        Target("gw", "gateway", "u", "u", _FakeProcess()),  # type: ignore[arg-type]
    ]
    points = [
        Point("nginx direct", 0, False, 1, _result(40000, 0.02), 0.01, 0.9),
        Point("nginx direct", 0, False, 16, _result(60000, 0.2), 0.01, 0.9),
        Point("nginx direct", 0, True, 16, _result(60000, 0.2), 0.01, 0.9),
    ]
    for rnd, rps in enumerate([3000.0, 4000.0, 5000.0]):
        points += [
            Point("gw", rnd, False, 1, _result(rps / 2, 0.42), 0.3, 0.9),
            Point("gw", rnd, False, 16, _result(rps, 3.0), 0.25, 0.9),
            Point("gw", rnd, True, 16, _result(rps / 2, 5.0), 0.4, 0.9),
        ]
    rows = summarize(targets, points, {"gw": 60.0, "nginx direct": 12.0})
    direct, gateway = rows
    assert direct.added_p50_ms_c1 is None
    assert gateway.requests_per_s == {1: 2000.0, 16: 4000.0}
    assert gateway.added_p50_ms_c1 == pytest.approx(0.40)
    assert gateway.streams_per_s == 2000.0
    goals = check_goals(rows, Goals(), 16)
    assert [line.split()[1] for line in goals] == ["ok", "MISS", "ok"]
    relaxed = check_goals(rows, Goals(), 16, {"gw": GOAL_SETS["full-policy"]})
    assert [line.split()[1] for line in relaxed] == ["ok", "ok", "ok"]
    [within] = check_within(rows, [("gw", "nginx direct", 0.2)])
    assert within.startswith("gw: MISS req/s c=16 6.7% of nginx direct's")
    table = markdown_table(rows, (1, 16), 16)
    assert "| gw | 2,000 / 4,000 |" in table
    assert "+0.400 ms" in table
    assert len({line.count("|") for line in table.splitlines()}) == 1
    assert noise_notes(rows) == []
    assert noise_notes(rows, min_utilization=0.95)[0].startswith("gw used 90% of a core at c=16")
    data = to_json({"x": 1}, rows, points)
    json.dumps(data)
    assert data["rows"][1]["rss_mib"] == 60.0
