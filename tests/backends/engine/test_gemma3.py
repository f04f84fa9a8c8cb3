"""Gemma 3 on tiny random models (transformers' Gemma3ForCausalLM saved on the fly): greedy tokens identical
to transformers in fp32 for prompts several windows long, with sliding layers interleaved with full ones,
through batching, chunked prefill, preemption and prefix hits, on the CPU decode kernel and the torch path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from backends.engine.loader import load_model
from backends.engine.model_config import ModelConfig
from backends.engine.models import build_model
from backends.engine.models.gemma3 import Gemma3ForCausalLM
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_engine_vs_hf import assert_matches_hf, random_prompts
from tests.backends.engine.test_sliding_window import torch_decode_path  # noqa: F401 (a fixture)
from tests.backends.engine.tiny import GEMMA3_VARIANTS

LONG = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=1)


def test_config_and_model_follow_layer_types(tiny_dirs: dict[str, Path]) -> None:
    loaded = load_model(str(tiny_dirs["gemma3_window8"]))
    cfg = loaded.model_config
    assert cfg.architecture == "Gemma3ForCausalLM" and cfg.hidden_act == "gelu_pytorch_tanh"
    assert (cfg.sliding_window, cfg.rope_theta, cfg.rope_local_theta) == (8, 1e6, 1e4)
    assert cfg.query_pre_attn_scalar == 24 and cfg.final_logit_softcapping is None
    assert [cfg.is_sliding(i) for i in range(cfg.num_layers)] == [True, True, False, True, True, False]
    model = build_model(cfg, max_position=64)
    assert isinstance(model, Gemma3ForCausalLM)
    attn: list[Any] = [layer.self_attn for layer in model.layers]
    assert [a.is_sliding for a in attn] == [True, True, False, True, True, False]
    assert attn[0].rotary is attn[1].rotary is not attn[2].rotary  # local and global RoPE bases
    assert attn[0].scale == 24**-0.5


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
@torch.inference_mode()
def test_transformers_mixes_the_window(variant: str, hf_models: dict[str, Any]) -> None:
    """The oracle itself slides, and only on the sliding layers: logits equal full attention up to the
    window and differ past it; with every layer full they differ again (the full layers see it all)."""
    hf = hf_models[variant]
    window = hf.config.sliding_window
    ids = torch.tensor([random_prompts(1, 3 * window, 3 * window, seed=20)[0]])
    mixed = hf(ids).logits[0]
    hf.config.sliding_window = 10 * window  # never bites: every layer attends fully
    try:
        full = hf(ids).logits[0]
    finally:
        hf.config.sliding_window = window
    torch.testing.assert_close(mixed[:window], full[:window])
    assert (mixed[window:] - full[window:]).abs().amax() > 1e-3


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_batched_prompts_match_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant)
    assert engine.runner.is_mixed
    prompts = random_prompts(6, 1, 90, seed=21)  # one shorter than a window, most several windows long
    assert_matches_hf(hf_models[variant], prompts, engine.generate(prompts, LONG), max_tokens=24)


@pytest.mark.usefixtures("torch_decode_path")
def test_torch_decode_path_matches_hf(make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    engine = make_engine("gemma3_window20")
    assert engine.runner.model.layers[0].self_attn.backend.decode_kernel is None  # type: ignore[union-attr]
    prompts = random_prompts(4, 30, 70, seed=22)
    assert_matches_hf(hf_models["gemma3_window20"], prompts, engine.generate(prompts, LONG), max_tokens=24)


@pytest.mark.parametrize(("variant", "chunk"), [("gemma3_window8", 5), ("gemma3_window20", 13)])
def test_chunked_prefill_matches_hf(
    variant: str, chunk: int, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant, max_num_batched_tokens=chunk)
    prompts = random_prompts(3, 40, 80, seed=23)
    assert_matches_hf(hf_models[variant], prompts, engine.generate(prompts, LONG), max_tokens=24)


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_preemption_matches_hf(variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]) -> None:
    cfg = hf_models[variant].config
    # layers x K,V x kv heads x head_dim x fp32 x 16 tokens
    block_bytes = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4 * 16
    engine = make_engine(variant, kv_cache_bytes=12 * block_bytes, max_num_batched_tokens=32)
    prompts = random_prompts(4, 35, 45, seed=24)
    outputs = engine.generate(prompts, LONG)
    assert engine.stats().num_preemptions > 0
    assert_matches_hf(hf_models[variant], prompts, outputs, max_tokens=24)


@pytest.mark.parametrize("variant", GEMMA3_VARIANTS)
def test_prefix_cache_hits_match_hf(
    variant: str, make_engine: EngineFactory, hf_models: dict[str, Any]
) -> None:
    engine = make_engine(variant, max_num_batched_tokens=24)  # chunked as well
    shared = random_prompts(1, 50, 50, seed=25)[0]
    prompts = [shared + tail for tail in random_prompts(3, 1, 20, seed=26)] + [shared]
    first = engine.generate(prompts[:1], LONG)
    rest = engine.generate(prompts[1:], LONG)
    assert all(out.num_cached_tokens == 48 for out in rest)  # the query chunk starts after cached blocks
    assert_matches_hf(hf_models[variant], prompts, first + rest, max_tokens=24)


def test_full_layers_keep_every_block(make_engine: EngineFactory) -> None:
    """A full layer reads the whole context, so the window never lets the pool give blocks back."""
    engine = make_engine("gemma3_window8")
    engine.add_request(
        "r", random_prompts(1, 60, 60, seed=27)[0], SamplingParams(max_tokens=4, ignore_eos=True)
    )
    engine.step()  # the whole prompt in one chunk
    seq = engine.scheduler.running[0]
    assert len(seq.block_table) == 4 and all(block >= 0 for block in seq.block_table)
    while engine.has_unfinished_requests():
        engine.step()


def test_hf_config_defaults_and_refusals() -> None:
    base: dict[str, Any] = {
        "architectures": ["Gemma3ForCausalLM"],
        "vocab_size": 300,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 12,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "sliding_window": 32,
    }
    cfg = ModelConfig.from_hf(base)  # no layer_types: every 6th layer is full, as transformers reads it
    assert [i for i in range(12) if not cfg.is_sliding(i)] == [5, 11]
    assert cfg.tie_word_embeddings and cfg.query_pre_attn_scalar == 256
    older = ModelConfig.from_hf({**base, "rope_theta": 5e5, "rope_local_base_freq": 2e4})
    assert (older.rope_theta, older.rope_local_theta) == (5e5, 2e4)
    linear = ModelConfig.from_hf({**base, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    assert linear.rope_scaling == {"rope_type": "linear", "factor": 8.0}  # the full layers' only
    with pytest.raises(Exception, match="attn_logit_softcapping"):
        ModelConfig.from_hf({**base, "attn_logit_softcapping": 50.0})
