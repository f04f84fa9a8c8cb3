"""gateway/cli/policy.py: every file checked, a line each, exit 1 when any is invalid."""

from __future__ import annotations

from pathlib import Path

import pytest

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
