"""What each rank of a parallel engine builds and how rank 0 starts the others: a worker that fails to
start is reported and leaves nothing behind; what cannot start is refused before any process does."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.errors import EngineDeadError
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import LoadedModel, load_model
from backends.engine.rank import rank_device


def failing_loader(model: str) -> LoadedModel:
    """Loads in rank 0 and fails in every worker rank."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("no weights on this rank")
    return load_model(model)


def two_ranks(model_dir: Path) -> EngineConfig:
    return EngineConfig(
        model=str(model_dir), device="cpu", kv_cache_bytes=1 << 20, num_threads=1, tensor_parallel_size=2
    )


def test_a_worker_that_fails_to_start_is_reported(tiny_dirs: dict[str, Path]) -> None:
    num_threads = torch.get_num_threads()
    try:
        with pytest.raises(EngineDeadError, match="rank 1 failed: RuntimeError: no weights on this rank"):
            LLMEngine(two_ranks(tiny_dirs["gqa"]), loader=failing_loader)
        assert multiprocessing.active_children() == []
        LLMEngine(two_ranks(tiny_dirs["gqa"])).close()  # the failed start left no process group behind
    finally:
        torch.set_num_threads(num_threads)


def test_a_loader_that_cannot_reach_the_workers_is_refused(tiny_dirs: dict[str, Path]) -> None:
    num_threads = torch.get_num_threads()
    try:
        with pytest.raises(ValueError, match="loader must pickle"):
            LLMEngine(two_ranks(tiny_dirs["gqa"]), loader=lambda name: load_model(name))
        assert multiprocessing.active_children() == []
    finally:
        torch.set_num_threads(num_threads)


def test_each_rank_needs_a_gpu_of_its_own() -> None:
    assert rank_device(torch.device("cpu"), 3) == torch.device("cpu")
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="rank 1 needs a GPU of its own"):
            rank_device(torch.device("cuda"), 1)
