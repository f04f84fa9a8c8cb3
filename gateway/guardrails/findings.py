"""A detector's finding (a kind and a span of one text) and the redaction that replaces findings."""

from __future__ import annotations

from typing import NamedTuple


class Finding(NamedTuple):
    """``text[start:end]`` is a ``kind`` (``email``, ``openai_key``, ``block_list``, ...)."""

    kind: str
    start: int
    end: int


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind.upper()}]"


def redact(text: str, findings: list[Finding]) -> str:
    """``text`` with each finding replaced by its placeholder; of overlapping findings the first to
    start (the longer on a tie) wins."""
    if not findings:
        return text
    parts: list[str] = []
    at = 0
    for finding in sorted(findings, key=lambda f: (f.start, -f.end)):
        if finding.start < at:  # overlaps one already replaced
            continue
        parts.append(text[at : finding.start])
        parts.append(placeholder(finding.kind))
        at = finding.end
    parts.append(text[at:])
    return "".join(parts)


__all__ = ["Finding", "placeholder", "redact"]
