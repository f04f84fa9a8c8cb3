"""Redaction: placeholders by kind; overlapping findings replaced once."""

from __future__ import annotations

from gateway.guardrails.findings import Finding, placeholder, redact


def test_placeholders_replace_the_spans() -> None:
    text = "mail a@b.io and call 555-123-4567."
    findings = [Finding("phone", 21, 33), Finding("email", 5, 11)]
    assert redact(text, findings) == "mail [REDACTED:EMAIL] and call [REDACTED:PHONE]."
    assert placeholder("openai_key") == "[REDACTED:OPENAI_KEY]"


def test_overlaps_keep_the_first_and_longest() -> None:
    assert redact("abcdef", [Finding("b", 2, 4), Finding("a", 1, 5), Finding("c", 1, 3)]) == (
        "a[REDACTED:A]f"
    )
    assert redact("same", []) == "same"
