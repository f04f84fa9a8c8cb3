"""`route explain`: prints pool, reason and probabilities; refuses with exit 2, and the load error,
every policy `sortyard serve` would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.explain import explain_main

POOLS = (
    "pools:\n"
    "  medium: {replicas: [{base_url: 'http://127.0.0.1:9/v1', model: m}]}\n"
    "  large: {replicas: [{base_url: 'http://127.0.0.1:9/v1', model: l}]}\n"
)
RULES = (
    "classifier:\n  kind: rules\n  fallback_pool: medium\n  rules:\n    - {pool: large, keywords: [prove]}\n"
)


@pytest.fixture(autouse=True)
def _no_overlay_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SORTYARD_POLICY_OVERLAY", raising=False)


def test_explain_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_main(["Prove that there are infinitely many primes."]) == 0
    out = capsys.readouterr().out
    assert "pool: large" in out
    assert "reason: learned p(large)=" in out
    assert "probabilities: small=" in out


def test_explain_with_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POOLS + RULES)
    assert explain_main(["please prove it", "--policy", str(policy)]) == 0
    assert "reason: rules keyword:prove" in capsys.readouterr().out
    assert explain_main(["hello", "--policy", str(policy)]) == 0
    assert "pool: medium" in capsys.readouterr().out


def test_explain_merges_the_overlay_serve_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text(POOLS + RULES)
    (tmp_path / "local.yaml").write_text("classifier: {fallback_pool: large}\n")
    assert explain_main(["hello", "--policy", str(tmp_path / "policy.yaml")]) == 0
    assert "pool: large" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (POOLS + "classifier: {kind: learned, path: /nonexistent/router.bin}\n", "does not exist"),
        (POOLS + "classifier: {kind: learned, cost_quality: 3}\n", "classifier.cost_quality"),
        (POOLS + "classifier: {kind: rules, rules: [{pool: nope, keywords: [hi]}]}\n", "nope"),
        (POOLS, "no classifier: section"),
        (POOLS + "routing: [1]\n", "routing"),
        (POOLS + "routing: {classifier: {kind: rules, rules: []}}\n", "unknown field"),
        ("kind: rules\nrules: [{pool: large, keywords: [hi]}]\n", "unknown field"),
        ("kind: [", "invalid YAML"),
        (b"pools: {}\n# \xff\xfe\n", "cannot read"),
    ],
)
def test_explain_refuses_what_serve_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str | bytes, message: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_bytes(body if isinstance(body, bytes) else body.encode())
    assert explain_main(["hi", "--policy", str(policy)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and message in err
