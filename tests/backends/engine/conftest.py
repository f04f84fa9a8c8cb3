"""Fixtures: tiny HF models built once per session; engines whose block pool is checked after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from tests.backends.engine.tiny import VARIANTS, build_tiny_model, load_hf


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {name: build_tiny_model(root / name, name) for name in VARIANTS}


@pytest.fixture(scope="session")
def hf_models(tiny_dirs: dict[str, Path]) -> dict[str, Any]:
    return {name: load_hf(path) for name, path in tiny_dirs.items()}


EngineFactory = Callable[..., LLMEngine]


@pytest.fixture
def make_engine(tiny_dirs: dict[str, Path]) -> Iterator[EngineFactory]:
    """Build engines on tiny models; after the test, every pool must be consistent and fully free."""
    engines: list[LLMEngine] = []
    num_threads = torch.get_num_threads()  # the engine sets it process-wide: put it back afterwards

    def make(variant: str = "gqa", **overrides: Any) -> LLMEngine:
        opts: dict[str, Any] = {"device": "cpu", "kv_cache_bytes": 4 << 20, "num_threads": 1, **overrides}
        engine = LLMEngine(EngineConfig(model=str(tiny_dirs[variant]), **opts))
        engines.append(engine)
        return engine

    yield make
    torch.set_num_threads(num_threads)
    for engine in engines:
        engine.check_invariants()
        if not engine.has_unfinished_requests():
            bm = engine.block_manager
            assert bm.num_free_blocks == bm.num_blocks, "blocks leaked after every request finished"
