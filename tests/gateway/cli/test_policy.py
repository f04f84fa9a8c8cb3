"""gateway/cli/policy.py: every file checked, a line each, exit 1 when any is invalid."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.parser import main
from gateway.cli.policy import policy_check

REPO = Path(__file__).resolve().parents[3]


def test_a_bad_file_fails_the_check_but_the_rest_are_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = str(REPO / "policies" / "default.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  large:\n    replicas:\n      - {base_url: 'nope', model: m}\n")
    assert policy_check([good]) == 0
    assert capsys.readouterr().out.startswith(f"{good}: ok (")
    assert policy_check([str(bad), good]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{good}: ok (") and "error: " in err and "base_url" in err


POLICY = "pools:\n  small:\n    replicas:\n      - {base_url: 'http://127.0.0.1:9/v1', model: m}\n"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A valid policy with a broken ``local.yaml`` beside it: the pair ``sortyard serve`` refuses."""
    monkeypatch.delenv("SORTYARD_POLICY_OVERLAY", raising=False)
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "local.yaml").write_text("pools: {small: 5}\n")
    return tmp_path


def test_the_overlay_serve_would_merge_is_checked_too(
    served: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, overlay = str(served / "policy.yaml"), str(served / "local.yaml")
    assert main(["policy", "check", policy]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"(with the overlay {overlay} merged on top)" in err
    assert main(["policy", "check", "--no-overlay", policy]) == 0
    assert capsys.readouterr().out.startswith(f"{policy}: ok (")
    (served / "local.yaml").write_text("aliases: {mini: small}\n")
    assert main(["policy", "check", policy]) == 0
    assert f"1 aliases; overlay {overlay} merged)" in capsys.readouterr().out


def test_an_overlay_named_but_missing_is_refused(served: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(served / "nope.yaml")
    assert main(["policy", "check", str(served / "policy.yaml"), "--overlay", missing]) == 1
    assert capsys.readouterr().err == f"error: {missing}: no such overlay file (--overlay)\n"
