"""Tiny-model engines for the structured-output tests: only the tiny Llama is built, and JSON may have
at most a few whitespace characters between tokens, so a masked random model (which likes whitespace as
much as anything) finishes each schema in a few hundred tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.structured_output.compiler import GrammarCompilerConfig
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.tiny import build_tiny_model

GRAMMAR_CONFIG = GrammarCompilerConfig(max_whitespace=2)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"gqa": build_tiny_model(tmp_path_factory.mktemp("structured-tiny") / "gqa", "gqa")}


@pytest.fixture
def make_engine(tiny_dirs: dict[str, Path]) -> Iterator[EngineFactory]:
    """Engines on the tiny Llama; after the test every pool is consistent and, once idle, fully free."""
    engines: list[LLMEngine] = []
    num_threads = torch.get_num_threads()

    def make(variant: str = "gqa", **overrides: Any) -> LLMEngine:
        opts: dict[str, Any] = {"device": "cpu", "kv_cache_bytes": 4 << 20, "num_threads": 1, **overrides}
        engine = LLMEngine(EngineConfig(model=str(tiny_dirs[variant]), **opts), grammar_config=GRAMMAR_CONFIG)
        engines.append(engine)
        return engine

    yield make
    torch.set_num_threads(num_threads)
    for engine in engines:
        engine.check_invariants()
        if not engine.has_unfinished_requests():
            bm = engine.block_manager
            assert bm.num_free_blocks == bm.num_blocks, "blocks leaked after every request finished"
