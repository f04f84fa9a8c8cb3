"""Load a llama.cpp GGUF file: metadata -> ModelConfig, tokenizer, tensors dequantised to HF names.

Decoder GEMM weights stored as Q4_0 or Q4_1 are not dequantised: they go out as ``QuantizedTensor`` (the
blocks, rows unpermuted like any other q/k weight), which ``MergedLinear`` packs for int4 as they are, or
dequantises to the same floats as here.

Architectures: ``llama`` (SmolLM2...), ``qwen2`` and ``gemma3``. llama.cpp stores a llama's q and k rows
permuted for its interleaved RoPE; ``unpermute_qk`` restores the Hugging Face (rotate-half) order. Its
Gemma converter permutes nothing but stores every norm weight plus one (llama.cpp multiplies by the
weight as is; Gemma's checkpoints and transformers keep it zero-centred), so one is taken off again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from backends.engine.errors import ModelLoadError
from backends.engine.layers.gguf_blocks import GGUF_BLOCK_BYTES, QuantizedTensor
from backends.engine.loader import LoadedModel
from backends.engine.loader.gguf_file import GGUFFile, read_gguf
from backends.engine.loader.gguf_tokenizer import gguf_tokenizer
from backends.engine.model_config import ModelConfig, gemma3_layer_types

log = logging.getLogger(__name__)

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
GEMMA3_LOCAL_ROPE_THETA = 10_000.0
"""Gemma 3's sliding layers' RoPE base: transformers' default, which the GGUF does not store."""
GEMMA3_SLIDING_PATTERN = 6

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GEMMA3_LAYER_NAMES = {
    **_LAYER_NAMES,
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_GEMM_WEIGHTS = tuple(
    f"{g}.weight" for g in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
)
"""The weights that may go out as blocks: every decoder GEMM's (never the embeddings or LM head)."""


def load_gguf(path: str | Path, *, served_name: str) -> LoadedModel:
    gguf = read_gguf(path)
    meta = gguf.metadata
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(
            f"{path}: unsupported GGUF architecture {arch!r}; supported: {sorted(ARCHITECTURES)}"
        )
    cfg = _model_config(meta, arch, gguf)
    return LoadedModel(cfg, gguf_tokenizer(meta), _iter_tensors(gguf, cfg), served_name)


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's row permutation of a q or k projection (weight or bias)."""
    rows = w.shape[0]
    head_dim = rows // num_heads
    rest = w.shape[1:]
    return w.reshape(num_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


def _model_config(meta: dict[str, Any], arch: str, gguf: GGUFFile) -> ModelConfig:
    names = {t.name for t in gguf.tensors}
    num_heads = int(meta[f"{arch}.attention.head_count"])
    hidden = int(meta[f"{arch}.embedding_length"])
    num_layers = int(meta[f"{arch}.block_count"])
    vocab = meta.get(f"{arch}.vocab_size") or len(meta["tokenizer.ggml.tokens"])
    head_dim = int(meta.get(f"{arch}.attention.key_length") or hidden // num_heads)
    rope_scaling = None
    if meta.get(f"{arch}.rope.scaling.type") == "linear":
        rope_scaling = {"rope_type": "linear", "factor": float(meta[f"{arch}.rope.scaling.factor"])}
    common: dict[str, Any] = {
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(meta[f"{arch}.feed_forward_length"]),
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": int(meta.get(f"{arch}.attention.head_count_kv") or num_heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "rope_scaling": rope_scaling,
        "max_position_embeddings": int(meta.get(f"{arch}.context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "architecture": ARCHITECTURES[arch],
    }
    if arch != "gemma3":
        return ModelConfig(**common, attention_bias=arch == "qwen2")
    window = meta.get("gemma3.attention.sliding_window")
    return ModelConfig(
        **common,
        sliding_window=None if window is None else int(window),
        layer_types=None if window is None else tuple(gemma3_layer_types(num_layers, GEMMA3_SLIDING_PATTERN)),
        hidden_act="gelu_pytorch_tanh",
        rope_local_theta=GEMMA3_LOCAL_ROPE_THETA,
        # transformers' Gemma3TextConfig default; the GGUF stores none (it equals head_dim on 270M)
        query_pre_attn_scalar=float(meta.get("gemma3.attention.query_pre_attn_scalar", 256)),
        final_logit_softcapping=meta.get("gemma3.final_logit_softcapping"),
    )


def _iter_tensors(gguf: GGUFFile, cfg: ModelConfig) -> Iterator[tuple[str, torch.Tensor | QuantizedTensor]]:
    is_gemma = cfg.architecture == "Gemma3ForCausalLM"
    layer_names = _GEMMA3_LAYER_NAMES if is_gemma else _LAYER_NAMES
    for t in gguf.tensors:
        if t.name == "rope_freqs.weight":  # llama3 scaling factors, recomputed from the config instead
            continue
        if t.name in _GLOBAL_NAMES:
            name = _GLOBAL_NAMES[t.name]
        else:
            m = _BLOCK.fullmatch(t.name)
            if m is None or m.group(2) not in layer_names:
                raise ModelLoadError(f"unexpected GGUF tensor {t.name!r}")
            name = f"model.layers.{m.group(1)}.{layer_names[m.group(2)]}.{m.group(3)}"
        as_blocks = t.qtype.name in GGUF_BLOCK_BYTES and name.endswith(_GEMM_WEIGHTS)
        w = t.data if as_blocks else t.dequantize()  # blocks: [rows, bytes], whole rows, so they permute
        if cfg.architecture == "LlamaForCausalLM":
            if name.endswith("q_proj.weight") or name.endswith("q_proj.bias"):
                w = unpermute_qk(w, cfg.num_heads)
            elif name.endswith("k_proj.weight") or name.endswith("k_proj.bias"):
                w = unpermute_qk(w, cfg.num_kv_heads)
        elif is_gemma and name.endswith("norm.weight"):
            w -= 1.0
        if as_blocks:
            rows, cols = t.shape
            yield name, QuantizedTensor(t.qtype.name, (rows, cols), w)
            continue
        yield name, torch.from_numpy(np.require(w, dtype=np.float32, requirements=["C", "W"]))
