"""Models of real shapes with random weights made on the device (the GPU machine reaches no registry and
carries no checkpoint), and a word-level tokenizer over their whole vocabulary.

``SMOLLM2_135M`` is SmolLM2-135M's architecture, ``LLAMA_1B`` Llama 3.2 1B's; ``TINY`` is a two-layer
model for the dry run. Weights are normal with std 0.02 (norms one): their values change no timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import tokenizers
import torch
from tokenizers import models

from backends.engine.loader import LoadedModel
from backends.engine.model_config import ModelConfig
from backends.engine.tokenizer import Tokenizer

SMOLLM2_135M = ModelConfig(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    rope_theta=100000.0,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
)
LLAMA_1B = ModelConfig(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_layers=16,
    num_heads=32,
    num_kv_heads=8,
    head_dim=64,
    rope_theta=500000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    max_position_embeddings=8192,  # the real 131072 only grows the rotary table
    tie_word_embeddings=True,
)
TINY = ModelConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    max_position_embeddings=2048,
)
MODELS = {"smollm2-135m": SMOLLM2_135M, "llama-1b": LLAMA_1B, "tiny": TINY}
FIRST_TOKEN_ID = 1
"""Prompts draw ids from here to ``vocab_size - 1``: id 0 is the tokenizer's unknown, the last is eos."""


def word_tokenizer(vocab_size: int) -> Tokenizer:
    """One word a token (``t0`` ... ``tN``), eos the last: decoding costs what a real tokenizer's does."""
    vocab = {f"t{i}": i for i in range(vocab_size)}
    backend = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    return Tokenizer(backend, eos_token_id=vocab_size - 1)


def random_weights(
    cfg: ModelConfig, device: torch.device, seed: int = 0
) -> Iterator[tuple[str, torch.Tensor]]:
    """Hugging Face-named tensors of ``cfg``'s shapes, made on ``device`` one at a time."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=device) * 0.02

    hidden, inner = cfg.hidden_size, cfg.intermediate_size
    q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    yield "model.embed_tokens.weight", normal(cfg.vocab_size, hidden)
    for i in range(cfg.num_layers):
        prefix = f"model.layers.{i}"
        yield f"{prefix}.input_layernorm.weight", torch.ones(hidden, device=device)
        yield f"{prefix}.post_attention_layernorm.weight", torch.ones(hidden, device=device)
        yield f"{prefix}.self_attn.q_proj.weight", normal(q_size, hidden)
        yield f"{prefix}.self_attn.k_proj.weight", normal(kv_size, hidden)
        yield f"{prefix}.self_attn.v_proj.weight", normal(kv_size, hidden)
        yield f"{prefix}.self_attn.o_proj.weight", normal(hidden, q_size)
        yield f"{prefix}.mlp.gate_proj.weight", normal(inner, hidden)
        yield f"{prefix}.mlp.up_proj.weight", normal(inner, hidden)
        yield f"{prefix}.mlp.down_proj.weight", normal(hidden, inner)
    yield "model.norm.weight", torch.ones(hidden, device=device)
    if not cfg.tie_word_embeddings:
        yield "lm_head.weight", normal(cfg.vocab_size, hidden)


def random_loader(name: str, device: torch.device) -> LoadedModel:
    """``MODELS[name]`` with random weights on ``device``, as the engine's ``ModelLoader`` returns it."""
    cfg = MODELS[name]
    return LoadedModel(
        model_config=replace(cfg),
        tokenizer=word_tokenizer(cfg.vocab_size),
        weights=random_weights(cfg, device),
        served_name=name,
    )


def weight_bytes_per_step(cfg: ModelConfig, dtype_bytes: int) -> int:
    """Weight bytes one decode step reads: every decoder GEMM and the LM head (the embedding table read
    whole only when it is the tied LM head), norms included."""
    hidden, inner = cfg.hidden_size, cfg.intermediate_size
    q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = hidden * (q_size + 2 * kv_size) + q_size * hidden + 3 * hidden * inner + 2 * hidden
    return dtype_bytes * (cfg.num_layers * per_layer + cfg.vocab_size * hidden + hidden)
