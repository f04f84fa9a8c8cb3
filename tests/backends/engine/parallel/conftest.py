"""Engines over tiny random models, one process or split over ranks (gloo on CPU), closed after each test,
and the scenario both run: batching, chunked prefill, preemption and prefix-cache hits."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import ModelLoader
from backends.engine.model_config import ModelConfig
from backends.engine.parallel.group import ParallelLayout
from backends.engine.sampling_params import SamplingParams

BLOCK_SIZE = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, logprobs=0)

EngineMaker = Callable[..., LLMEngine]


@pytest.fixture
def make_engine(tiny_dirs: dict[str, Path]) -> Iterator[EngineMaker]:
    """``make(variant, tp=1, pp=1, num_blocks=None, loader=None, **config)``: an engine on CPU with one
    thread a rank; ``num_blocks`` sizes each rank's KV budget to exactly that many blocks. Every engine
    is closed afterwards (its workers stopped, its process group left)."""
    engines: list[LLMEngine] = []
    num_threads = torch.get_num_threads()  # the engine sets it process-wide: put it back afterwards

    def make(
        variant: str = "gqa",
        *,
        tp: int = 1,
        pp: int = 1,
        num_blocks: int | None = None,
        loader: ModelLoader | None = None,
        **overrides: Any,
    ) -> LLMEngine:
        kv_bytes = (
            4 << 20 if num_blocks is None else num_blocks * rank_block_bytes(tiny_dirs[variant], tp, pp)
        )
        opts: dict[str, Any] = {
            "device": "cpu",
            "kv_cache_bytes": kv_bytes,
            "num_threads": 1,
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "distributed_timeout_s": 20.0,
            **overrides,
        }
        engine = LLMEngine(EngineConfig(model=str(tiny_dirs[variant]), **opts), loader=loader)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
    torch.set_num_threads(num_threads)


def rank_block_bytes(model_dir: Path, tp: int, pp: int) -> int:
    """Bytes of one fp32 KV block on the most loaded rank: its stage's layers, its KV heads."""
    cfg = ModelConfig.from_hf(json.loads((model_dir / "config.json").read_text()))
    layout = ParallelLayout(tp, pp)
    layers = layout.max_stage_layers(cfg.num_layers)
    return 2 * layers * layout.kv_heads_per_rank(cfg.num_kv_heads) * cfg.head_dim * 4 * BLOCK_SIZE


def random_prompts(num: int, min_len: int, max_len: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randint(min_len, max_len))] for _ in range(num)]


@dataclass
class Run:
    """What the scenario produced: each request's tokens and their logprobs, in submission order."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    num_cached_tokens: list[int]


def run_scenario(engine: LLMEngine) -> Run:
    """Four requests batched, their 35-60 token prompts prefilled in chunks (a 32-token budget), growing
    past what the pool holds (preemption when it is small); then a 48-token prefix computed once and two
    prompts that start with it (prefix-cache hits)."""
    outputs = engine.generate(random_prompts(4, 35, 60, seed=4), GREEDY)
    shared = random_prompts(1, 48, 48, seed=5)[0]
    outputs += engine.generate([shared], GREEDY)
    outputs += engine.generate([shared + tail for tail in random_prompts(2, 5, 20, seed=6)], GREEDY)
    completions = [out.outputs[0] for out in outputs]
    return Run(
        token_ids=[c.token_ids for c in completions],
        logprobs=[[chosen.logprob for chosen, _ in c.logprobs or []] for c in completions],
        num_cached_tokens=[out.num_cached_tokens for out in outputs],
    )


def assert_same_run(got: Run, want: Run) -> None:
    """Token for token; logprobs to float noise (a split sums partial products in another order)."""
    assert got.token_ids == want.token_ids
    for got_lps, want_lps in zip(got.logprobs, want.logprobs, strict=True):
        assert got_lps == pytest.approx(want_lps, abs=1e-4)
    assert got.num_cached_tokens == want.num_cached_tokens
