"""Fixtures for the tier classifier tests."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gateway.tiers.learned import default_model_path
from tools.tiers.corpus import LabelledPrompt, build_corpus

# Four small sources that together carry all three tiers: fast enough to build in every test run.
SMALL_SOURCES = ["gsm8k", "hellaswag", "truthfulqa", "humaneval"]


@pytest.fixture(scope="session")
def shipped_model_bytes() -> bytes:
    return default_model_path().read_bytes()


@pytest.fixture(scope="session")
def small_corpus() -> list[LabelledPrompt]:
    """A training corpus built from :data:`SMALL_SOURCES` of the installed data packages."""
    rows, _dropped = build_corpus(SMALL_SOURCES)
    return rows


@pytest.fixture
def tiers_jsonl(tmp_path: Path, small_corpus: list[LabelledPrompt]) -> Path:
    """:func:`small_corpus` written as a ``router train`` input file."""
    path = tmp_path / "tiers.jsonl"
    encoder = msgspec.json.Encoder()
    path.write_bytes(b"".join(encoder.encode(r) + b"\n" for r in small_corpus))
    return path
