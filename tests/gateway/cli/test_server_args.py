"""gateway/cli/server_args.py: ``serve`` and ``run`` refuse, with one ``error:`` line and exit 2, a flag
that could not serve, before the policy is read or uvicorn starts (every policy here is invalid, so a
check that let a flag through would end in the policy's error instead, never in a server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.parser import main
from gateway.cli.server_args import settings_problem
from gateway.settings import Settings


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("POLICY_OVERLAY", "PORT", "WORKERS", "LOG_LEVEL", "TLS_CERTFILE", "TLS_KEYFILE"):
        monkeypatch.delenv(f"SORTYARD_{name}", raising=False)
    policy = tmp_path / "policy.yaml"
    policy.write_text("pools: {}\n")
    return policy


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--log-level", "bogus"], "invalid choice: 'bogus'"),
        (["--port", "99999"], "expected 1 to 65535"),
        (["--port", "0"], "expected 1 to 65535"),
        (["--workers", "0"], "expected at least 1"),
        (["--workers", "-2"], "expected at least 1"),
    ],
)
def test_a_flag_out_of_range_is_refused(
    command: str, flags: list[str], message: str, broken: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--policy", str(broken), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize("kind", ["missing", "not pem"])
def test_tls_files_that_do_not_load_are_refused(
    command: str, kind: str, broken: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = str(broken.parent / "nope.crt") if kind == "missing" else str(broken)
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--policy", str(broken), "--tls-cert", cert, "--tls-key", cert])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the TLS certificate {cert} and key {cert} do not load: ")
    assert err.count("\n") == 1


def test_an_overlay_named_but_missing_is_refused(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(broken.parent / "nope" / "overlay.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--policy", str(broken), "--overlay", missing])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: {missing}: no such overlay file (--overlay)\n"
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--policy", str(broken), "--overlay", missing, "--no-engine"])
    assert exit_info.value.code == 2 and "no such folder" in capsys.readouterr().err


def test_settings_from_the_environment_are_checked_too() -> None:
    assert settings_problem(Settings(port=70000)) == "port 70000: expected 1 to 65535"
    assert settings_problem(Settings(workers=0)) == "workers 0: expected at least 1"
    assert "log level 'loud'" in (settings_problem(Settings(log_level="loud")) or "")
    assert settings_problem(Settings(log_level="INFO")) is None  # SORTYARD_LOG_LEVEL=INFO is info
    assert settings_problem(Settings()) is None
