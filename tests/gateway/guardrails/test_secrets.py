"""API keys and tokens by their prefixes, and words that only look like them."""

from __future__ import annotations

import pytest

from gateway.guardrails.secrets import SecretDetector

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"


def found(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in SecretDetector().find(text)]


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("openai_key", "sk-proj-abcdefghijklmnopqrstuvwxyz012345"),
        ("openai_key", "sk-abcdefghijklmnopqrstuvwxyz"),
        ("aws_key", "AKIAIOSFODNN7EXAMPLE"),
        ("github_token", "ghp_" + "a1B2" * 9),
        ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
        ("slack_token", "xoxb-1234567890-abcdefghij"),
        ("jwt", JWT),
        ("bearer", "Bearer abcdef0123456789abcdef"),
        ("bearer", "bearer abcdef0123456789abcdef=="),
    ],
)
def test_true_positives(kind: str, value: str) -> None:
    assert found(f"here: {value} (keep it safe)") == [(kind, value)]


@pytest.mark.parametrize(
    "text",
    [
        "task-abcdefghijklmnopqrstuvwxyz is a ticket",  # sk- inside a word
        "sk-short",
        "AKIA is a prefix, AKIAIOSFODNN7EXAMPL is one short",
        "ghp_tooShort and xoxa-1234567890-abc",
        "eyJ alone. and a.b.c",
        "the bearer of bad news",
    ],
)
def test_near_misses(text: str) -> None:
    assert found(text) == []
