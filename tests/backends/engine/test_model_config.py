"""ModelConfig: HF config.json parsing; sliding windows served on every layer or on some (Qwen2 past
max_window_layers), and the refusal of the windows transformers itself reads ambiguously (a Llama's,
which it ignores, and a Mistral's layer_types naming full layers, which it overrides)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.errors import ModelLoadError
from backends.engine.llm_engine import LLMEngine
from backends.engine.model_config import ModelConfig
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_engine_vs_hf import assert_matches_hf, random_prompts

LLAMA_REFUSAL = r"sliding_window=64 in config.json of a LlamaForCausalLM: transformers' Llama ignores"
MISTRAL_FULL_REFUSAL = (
    r"sliding_window=64 in config.json of a MistralForCausalLM whose layer_types names full_attention layers"
)
MISTRAL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral"}
GREEDY = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)


def hf_config(tiny_dirs: dict[str, Path], variant: str, **changes: Any) -> dict[str, Any]:
    return {**json.loads((tiny_dirs[variant] / "config.json").read_text()), **changes}


def model_dir(tiny_dirs: dict[str, Path], dst: Path, **changes: Any) -> Path:
    """The tiny Llama with ``changes`` in its config.json (every other file linked, not copied)."""
    src = tiny_dirs["gqa"]
    dst.mkdir()
    for file in src.iterdir():
        if file.name != "config.json":
            (dst / file.name).symlink_to(file)
    (dst / "config.json").write_text(json.dumps(hf_config(tiny_dirs, "gqa", **changes)))
    return dst


@pytest.fixture
def load(tiny_dirs: dict[str, Path], tmp_path: Path) -> Iterator[Any]:
    """Load the tiny Llama with config.json changes; ``max_model_len`` goes to the engine."""
    num_threads = torch.get_num_threads()  # the engine sets it process-wide: put it back afterwards
    names = (f"model{i}" for i in itertools.count())

    def make(max_model_len: int | None = None, **changes: Any) -> LLMEngine:
        path = model_dir(tiny_dirs, tmp_path / next(names), **changes)
        opts: dict[str, Any] = {"device": "cpu", "kv_cache_bytes": 1 << 20, "num_threads": 1}
        return LLMEngine(EngineConfig(model=str(path), max_model_len=max_model_len, **opts))

    yield make
    torch.set_num_threads(num_threads)


def test_a_mistral_window_on_every_layer_is_served(load: Any) -> None:
    engine = load(sliding_window=64, **MISTRAL)  # max_position_embeddings 1024: the window bites
    assert engine.runner.sliding_window == 64
    assert engine.generate([list(range(100))], GREEDY)[0].outputs[0].token_ids
    sliding = ["sliding_attention", "sliding_attention"]
    assert load(sliding_window=64, layer_types=sliding, **MISTRAL).runner.sliding_window == 64


def test_a_window_that_never_bites_runs_full_attention(load: Any) -> None:
    assert load(sliding_window=1024, **MISTRAL).runner.sliding_window is None  # the causal fast path
    assert load(max_model_len=64, sliding_window=64, **MISTRAL).runner.sliding_window is None


def test_a_llama_window_is_refused(load: Any) -> None:
    """transformers' LlamaForCausalLM ignores sliding_window, Mistral applies it: the engine won't guess."""
    with pytest.raises(ModelLoadError, match=LLAMA_REFUSAL):
        load(sliding_window=64)


@pytest.mark.parametrize(
    "layer_types",
    [["sliding_attention", "full_attention"], ["full_attention", "full_attention"]],
    ids=["mixed", "full"],  # transformers' Mistral would slide both anyway: ambiguous, refused
)
def test_a_mistral_window_with_full_layers_is_refused(load: Any, layer_types: list[str]) -> None:
    with pytest.raises(ModelLoadError, match=MISTRAL_FULL_REFUSAL + r".*set max_model_len <= 64"):
        load(sliding_window=64, layer_types=layer_types, **MISTRAL)
    assert load(max_model_len=64, sliding_window=64, layer_types=layer_types, **MISTRAL).max_model_len == 64


@pytest.mark.parametrize(
    "changes",
    [
        {"sliding_window": None},
        {"sliding_window": 1024},  # == max_position_embeddings: never bites
        {"sliding_window": 4096},
        {"sliding_window": 64, "use_sliding_window": False},
        {"sliding_window": 64, "layer_types": ["full_attention", "full_attention"]},
    ],
)
def test_a_window_that_never_bites_still_loads(load: Any, changes: dict[str, Any]) -> None:
    engine = load(**changes)
    prompt = list(range(100))  # longer than 64 tokens
    assert engine.generate([prompt], GREEDY)[0].outputs[0].token_ids


def test_max_model_len_within_the_window_loads(load: Any) -> None:
    assert load(max_model_len=64, sliding_window=64).max_model_len == 64
    with pytest.raises(ModelLoadError, match=r"max_model_len is 65\); set max_model_len <= 64"):
        load(max_model_len=65, sliding_window=64)


def test_qwen2_slides_only_when_enabled_and_past_max_window_layers(tiny_dirs: dict[str, Path]) -> None:
    def window(**changes: Any) -> int | None:
        """The parsed window of the tiny Qwen2's config.json with ``changes`` (None drops a key)."""
        cfg = hf_config(tiny_dirs, "qwen2", **changes)
        for key, value in changes.items():
            if value is None:
                cfg.pop(key)
        return ModelConfig.from_hf(cfg).sliding_window

    assert window(sliding_window=64) is None  # use_sliding_window false, as saved
    assert window(sliding_window=64, use_sliding_window=None) is None  # Qwen2's default is off
    on = {"sliding_window": 64, "use_sliding_window": True, "layer_types": None}
    assert window(**on, max_window_layers=2) is None  # both layers below max_window_layers
    assert window(**on, max_window_layers=1) == 64
    assert window(**{**on, "layer_types": ["full_attention", "sliding_attention"]}) == 64


def test_qwen2_serves_mixed_layers(tiny_dirs: dict[str, Path]) -> None:
    def config(max_window_layers: int) -> ModelConfig:
        """The tiny Qwen2 sliding from layer ``max_window_layers`` on (layer_types left to be implied)."""
        cfg = hf_config(tiny_dirs, "qwen2", sliding_window=64, use_sliding_window=True)
        cfg.pop("layer_types", None)
        return ModelConfig.from_hf({**cfg, "max_window_layers": max_window_layers})

    every = config(max_window_layers=0)
    every.check_servable(1024)
    assert every.attention_window(1024) == 64
    assert [every.is_sliding(i) for i in range(2)] == [True, True]
    mixed = config(max_window_layers=1)  # layer 0 full, layer 1 sliding
    mixed.check_servable(1024)
    assert mixed.attention_window(1024) == 64
    assert [mixed.is_sliding(i) for i in range(2)] == [False, True]


def test_qwen2_mixed_layers_match_hf(make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    engine = make_engine("qwen2_mixed_window8", max_num_batched_tokens=13)
    assert engine.runner.is_mixed
    prompts = random_prompts(3, 30, 60, seed=30)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=0)
    assert_matches_hf(
        hf_models["qwen2_mixed_window8"], prompts, engine.generate(prompts, params), max_tokens=12
    )
