"""gateway/cli/local.py: ``sortyard run``, the local engine it starts and a quiet terminal."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli.local import DEV_ACCESS_LOG, DEV_KEYS_FILE, dev_settings, engine_command, local_engine
from gateway.settings import Settings
from tests.gateway.cli.terminal import start_until_banner
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.redis_server import free_port

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
"""A line in :data:`gateway.cli.logs.LOG_FORMAT`."""


def test_dev_run_writes_the_access_log_to_a_file_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SORTYARD_ACCESS_LOG", raising=False)
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\n")
    settings = Settings(policy_path=str(policy))
    assert dev_settings(settings).access_log_file == DEV_ACCESS_LOG
    assert dev_settings(Settings(policy_path=str(policy), access_log_file="a.log")).access_log_file == "a.log"
    (tmp_path / "local.yaml").write_text("telemetry: {access_log: true}\n")  # asked in the policy
    assert dev_settings(settings).access_log_file is None
    (tmp_path / "local.yaml").unlink()
    monkeypatch.setenv("SORTYARD_ACCESS_LOG", "1")  # asked in the environment
    assert dev_settings(settings).access_log_file is None


def test_dev_run_keeps_keys_made_at_run_time_in_a_file_unless_told_where(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\n")
    assert dev_settings(Settings(policy_path=str(policy))).keys_file == DEV_KEYS_FILE
    assert dev_settings(Settings(policy_path=str(policy), keys_file="k.json")).keys_file == "k.json"


def test_the_engine_runs_without_progress_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    command, env = engine_command(Settings(log_level="warning"), ["smollm2-135m"], "127.0.0.1", 8100)
    assert command[1:7] == ["-m", "backends.server", "--model", "smollm2-135m", "--host", "127.0.0.1"]
    assert command[-4:] == ["--port", "8100", "--log-level", "warning"]
    assert env["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the user's choice stands
    assert engine_command(Settings(), ["m"], "h", 1)[1]["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"


def test_the_local_engine_serves_every_model_the_policy_names_there() -> None:
    settings = Settings(policy_path="policies/default.yaml", policy_overlay="no-such-overlay.yaml")
    target, models = local_engine(settings)
    assert target == ("127.0.0.1", 8100)
    assert models == ["smollm2-135m", "gemma3-270m"]  # once each; the embedder serves all-minilm-l6-v2
    command, _ = engine_command(Settings(), models, *target)
    assert command[3:7] == ["--model", "smollm2-135m", "--model", "gemma3-270m"]


def test_run_prints_the_banner_last_and_keeps_the_terminal_quiet(tmp_path: Path) -> None:
    """``sortyard run --no-engine`` in front of the fake upstream, as a user's terminal sees it."""
    upstream = FakeUpstream().start()
    replica = {"base_url": upstream.base_url, "model": "echo", "send_cache_salt": True}
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"version": 1, "pools": {"small": {"replicas": [replica]}}}))
    port = free_port()
    # cwd: where `run` keeps .local/
    proc, lines = start_until_banner(
        ["run", "--no-engine", "--policy", str(policy), "--port", str(port)], tmp_path
    )
    try:
        key = lines[-1].strip().partition("=")[2]
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
        upstream.stop()
    at_start, after = lines[:-3], rest.splitlines(keepends=True)

    ready = f"Sortyard is ready on http://127.0.0.1:{port} (access log: {DEV_ACCESS_LOG})."
    assert lines[-3] == ready + " Paste into a shell:\n"
    assert lines[-2] == f"export OPENAI_BASE_URL=http://127.0.0.1:{port}/v1\n"
    assert any("Uvicorn running on" in line for line in at_start)
    # one format, and nothing between the banner and the shutdown: no access log, no salt warning
    assert all(LOG_LINE.match(line) for line in at_start + after), "".join(at_start + after)
    assert after[0].rstrip().endswith("Shutting down"), "".join(after)
    assert not any(" WARNING " in line for line in at_start + after)
    entries = [json.loads(line) for line in (tmp_path / DEV_ACCESS_LOG).read_text().splitlines()]
    assert [(e["endpoint"], e["status"], e["tenant"]) for e in entries] == [("chat", 200, "dev")]
