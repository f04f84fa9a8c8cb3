"""Fixtures for the tier classifier tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.routing.learned import default_model_path

DATA_DIR = Path(__file__).resolve().parents[3] / "gateway" / "routing" / "data"


@pytest.fixture(scope="session")
def shipped_model_bytes() -> bytes:
    return default_model_path().read_bytes()


@pytest.fixture
def tiers_jsonl() -> Path:
    return DATA_DIR / "tiers.jsonl"
