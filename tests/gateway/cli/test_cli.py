"""gateway/cli/__init__.py: one argument tree for every README command, and a quiet ``switchyard run``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli import (
    DEV_ACCESS_LOG,
    LOG_FORMAT,
    dev_settings,
    engine_command,
    local_engine,
    logging_config,
    main,
)
from gateway.settings import Settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[3]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
"""A line in :data:`LOG_FORMAT`."""


def readme_commands() -> list[list[str]]:
    """The commands of the README's "Command line" table: ``switchyard`` then its lower-case words."""
    commands = []
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `switchyard ([^`]*)`", line)
        if match:
            words = match.group(1).split()
            commands.append(words[: next((i for i, w in enumerate(words) if not w.isalpha()), len(words))])
    return commands


def test_the_readme_table_is_read() -> None:
    assert readme_commands() == [
        ["run"],
        ["serve"],
        ["policy", "check"],
        ["keys", "new"],
        ["route", "explain"],
        ["router", "train"],
        ["cost", "estimate"],
    ]


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", readme_commands(), ids=" ".join)
def test_every_readme_command_answers_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _help(command, capsys).startswith(f"usage: switchyard {' '.join(command)} ")
    parent = _help(command[:-1], capsys)  # and its parent lists it
    assert re.search(rf"^\s+{command[-1]}\s", parent, re.M), parent


def test_top_level_help_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^ {4}(\w+) ", done.stdout, re.M))
    assert {command[0] for command in readme_commands()} <= listed, done.stdout


def test_arguments_reach_the_command_or_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "explain", "Prove that there are infinitely many primes.", "--tools"]) == 0
    assert "pool: " in capsys.readouterr().out
    for bad in (["keys", "new", "--tenant", "a", "--bogus"], ["policy"], ["route"], ["nope"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2


def test_dev_run_writes_the_access_log_to_a_file_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWITCHYARD_ACCESS_LOG", raising=False)
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\n")
    settings = Settings(policy_path=str(policy))
    assert dev_settings(settings).access_log_file == DEV_ACCESS_LOG
    assert dev_settings(Settings(policy_path=str(policy), access_log_file="a.log")).access_log_file == "a.log"
    (tmp_path / "local.yaml").write_text("telemetry: {access_log: true}\n")  # asked in the policy
    assert dev_settings(settings).access_log_file is None
    (tmp_path / "local.yaml").unlink()
    monkeypatch.setenv("SWITCHYARD_ACCESS_LOG", "1")  # asked in the environment
    assert dev_settings(settings).access_log_file is None


def test_logging_config_gives_uvicorn_the_gateway_format_and_the_access_log_its_file(
    tmp_path: Path,
) -> None:
    access_log = tmp_path / "access.log"
    config = logging_config(Settings(log_level="warning", access_log_file=str(access_log)))
    assert config["formatters"]["line"]["format"] == LOG_FORMAT
    assert config["root"] == {"level": "WARNING", "handlers": ["stderr"]}
    assert "uvicorn" not in json.dumps(config)  # uvicorn's loggers propagate to the root's handler
    access = config["loggers"]["switchyard.access"]
    assert access["propagate"] is False and config["handlers"][access["handlers"][0]]["filename"] == str(
        access_log
    )
    assert "switchyard.access" not in logging_config(Settings())["loggers"]  # serve: standard output
    assert logging_config(Settings(log_level="loud"))["root"]["level"] == "INFO"


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


def _start_until_banner(args: list[str], cwd: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """``python -m gateway ARGS`` as a user's terminal runs it, and its lines up to the banner's key line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    assert proc.stdout is not None
    while not (lines and lines[-1].startswith("export OPENAI_API_KEY=")):
        line = proc.stdout.readline()
        if not line:  # it exited before the banner
            proc.wait(30)
            raise AssertionError("".join(lines))
        lines.append(line)
    return proc, lines


def test_run_prints_the_banner_last_and_keeps_the_terminal_quiet(tmp_path: Path) -> None:
    """``switchyard run --no-engine`` in front of the fake upstream, as a user's terminal sees it."""
    upstream = FakeUpstream().start()
    replica = {"base_url": upstream.base_url, "model": "echo", "send_cache_salt": True}
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"version": 1, "pools": {"small": {"replicas": [replica]}}}))
    port = free_port()
    # cwd: where `run` keeps .local/
    proc, lines = _start_until_banner(
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

    ready = f"Switchyard is ready on http://127.0.0.1:{port} (access log: {DEV_ACCESS_LOG})."
    assert lines[-3] == ready + " Paste into a shell:\n"
    assert lines[-2] == f"export OPENAI_BASE_URL=http://127.0.0.1:{port}/v1\n"
    assert any("Uvicorn running on" in line for line in at_start)
    # one format, and nothing between the banner and the shutdown: no access log, no salt warning
    assert all(LOG_LINE.match(line) for line in at_start + after), "".join(at_start + after)
    assert after[0].rstrip().endswith("Shutting down"), "".join(after)
    assert not any(" WARNING " in line for line in at_start + after)
    entries = [json.loads(line) for line in (tmp_path / DEV_ACCESS_LOG).read_text().splitlines()]
    assert [(e["endpoint"], e["status"], e["tenant"]) for e in entries] == [("chat", 200, "dev")]


@pytest.mark.parametrize("auth_required", [True, False])
def test_serve_names_a_key_only_when_any_key_works(tmp_path: Path, auth_required: bool) -> None:
    """``switchyard serve`` knows no key of an auth policy (only hashes): it says how to get one."""
    policy = tmp_path / "policy.yaml"
    replica = {"base_url": "http://127.0.0.1:9/v1", "model": "echo"}
    document = {
        "version": 1,
        "pools": {"small": {"replicas": [replica]}},
        "auth": {"required": auth_required},
    }
    policy.write_text(yaml.safe_dump(document))
    port = free_port()
    proc, lines = _start_until_banner(["serve", "--policy", str(policy), "--port", str(port)], tmp_path)
    try:
        key_line = lines[-1]
        answer = httpx.get(
            f"http://127.0.0.1:{port}/v1/models", headers={"authorization": "Bearer sk-anything"}, timeout=10
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    if auth_required:
        assert answer.status_code == 401
        assert "sk-anything" not in key_line and "switchyard keys new" in key_line
    else:
        assert answer.status_code == 200 and key_line == "export OPENAI_API_KEY=sk-anything\n"
