"""loadtests/run.py and report.py: the driver's helpers and the summary it prints."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from loadtests.report import read_failures, read_stats, summary
from loadtests.run import _parser, _root_url, parse_exports, probe_model
from tests.loadtests.locust_csv import SAMPLE_ROWS, write_stats


def test_export_lines_and_host() -> None:
    lines = [
        "INFO: started\n",
        "Sortyard is ready on http://127.0.0.1:8000. Paste into a shell:\n",
        "export OPENAI_BASE_URL=http://127.0.0.1:8000/v1\n",
        "export OPENAI_API_KEY=sk-sy-abc=\n",
    ]
    assert parse_exports(lines) == {
        "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1",
        "OPENAI_API_KEY": "sk-sy-abc=",
    }
    for url in ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"):
        assert _root_url(url) == "http://127.0.0.1:8000"


def test_arguments() -> None:
    args = _parser().parse_args(
        ["--shape", "burst", "--classes", "ChatUser", "StreamingUser", "--", "-L", "DEBUG"]
    )
    assert args.shape == "burst" and args.classes == ["ChatUser", "StreamingUser"]
    assert args.locust_args == ["-L", "DEBUG"]
    assert (args.duration, args.users, args.port) == ("60s", 8, 8000)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--classes", "NoSuchUser"])


def test_report_reads_rows_failures_and_summarises(tmp_path: Path) -> None:
    prefix = tmp_path / "run"
    write_stats(prefix, *SAMPLE_ROWS)
    (tmp_path / "run_failures.csv").write_text(
        'Method,Name,Error,Occurrences\nPOST,stream,"HTTP 502 upstream_error: boom",1\n'
    )
    (tmp_path / "run_exceptions.csv").write_text("Count,Message,Traceback,Nodes\n")
    rows = read_stats(prefix)
    assert [r.name for r in rows] == ["chat", "stream", "ttft", "tokens_per_s", "output"]  # no Aggregated
    assert read_failures(prefix) == ["POST | stream | HTTP 502 upstream_error: boom | 1"]
    text = summary(rows)
    assert "requests: 150, failed unexpectedly: 1" in text
    assert "time to first token: median 420 ms" in text
    assert "decode speed per stream: median 23.5 tok/s" in text
    assert "output tokens generated: 4,800, 80.0 tok/s overall" in text


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        status = 200 if self.headers["Authorization"] == "Bearer good" else 404
        body = b'{"error": {"message": "no such model"}}' if status != 200 else b"{}"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tiny_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_probe_model(tiny_server: str) -> None:
    assert probe_model(tiny_server, "good", "auto") is None
    assert (probe_model(tiny_server, "bad", "auto") or "").startswith("HTTP 404")
    assert probe_model("http://127.0.0.1:9", "good", "auto", timeout_s=2) is not None
