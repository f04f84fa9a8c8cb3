"""`route explain`: prints pool, reason and probabilities; refuses bad policies with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.explain import explain_main


def test_explain_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_main(["Prove that there are infinitely many primes."]) == 0
    out = capsys.readouterr().out
    assert "pool: large" in out
    assert "reason: learned p(large)=" in out
    assert "probabilities: small=" in out


@pytest.mark.parametrize("nesting", ["top", "classifier", "routing"])
def test_explain_with_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str], nesting: str) -> None:
    body = "kind: rules\nfallback_pool: medium\nrules:\n  - {pool: large, keywords: [prove]}\n"
    if nesting != "top":
        body = "classifier:\n" + "".join("  " + line + "\n" for line in body.splitlines())
    if nesting == "routing":
        body = "routing:\n" + "".join("  " + line + "\n" for line in body.splitlines())
    policy = tmp_path / "policy.yaml"
    policy.write_text(body)
    assert explain_main(["please prove it", "--policy", str(policy)]) == 0
    assert "reason: rules keyword:prove" in capsys.readouterr().out
    assert explain_main(["hello", "--policy", str(policy)]) == 0
    assert "pool: medium" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("kind: learned\npath: /nonexistent/router.bin\n", "does not exist"),
        ("kind: learned\ncost_quality: 3\n", "invalid classifier config"),
        ("name: x\n", "no classifier section"),
        ("kind: [", "cannot read policy"),
    ],
)
def test_explain_refuses_bad_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(body)
    assert explain_main(["hi", "--policy", str(policy)]) == 2
    assert message in capsys.readouterr().err
