"""backends/model_loading.py: the embedding model's weights load while it holds the loading lock (the
start-up order is tests/backends/serving/test_lifecycle.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.embedder import Embedder
from backends.model_loading import LOADING


def test_the_embedder_loads_under_the_lock_once(monkeypatch: pytest.MonkeyPatch) -> None:
    held: list[bool] = []
    embedder = Embedder(Path("/nonexistent"))

    def load() -> None:
        held.append(LOADING.locked())
        embedder._model = object()

    monkeypatch.setattr(embedder, "_load", load)
    embedder.load()
    embedder.load()  # loaded: returns at once
    assert held == [True] and not LOADING.locked()
