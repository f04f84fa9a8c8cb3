"""Load a llama.cpp GGUF file: metadata -> ModelConfig, vocab/merges -> tokenizer, tensors dequantised.

llama.cpp stores q and k rows permuted for its interleaved RoPE; ``unpermute_qk`` restores the
Hugging Face (rotate-half) order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import decoders, models, pre_tokenizers, processors

from backends.engine.errors import ModelLoadError
from backends.engine.loader import LoadedModel
from backends.engine.model_config import ModelConfig
from backends.engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

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
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def load_gguf(path: str | Path, *, served_name: str) -> LoadedModel:
    reader = GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    arch = meta.get("general.architecture")
    if arch not in ("llama", "qwen2"):
        raise ModelLoadError(f"{path}: unsupported GGUF architecture {arch!r}")
    cfg = _model_config(meta, arch, reader)
    return LoadedModel(cfg, _tokenizer(meta), _iter_tensors(reader, cfg), served_name)


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's row permutation of a q or k projection (weight or bias)."""
    rows = w.shape[0]
    head_dim = rows // num_heads
    rest = w.shape[1:]
    return w.reshape(num_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


def _model_config(meta: dict[str, Any], arch: str, reader: GGUFReader) -> ModelConfig:
    names = {t.name for t in reader.tensors}
    num_heads = int(meta[f"{arch}.attention.head_count"])
    hidden = int(meta[f"{arch}.embedding_length"])
    vocab = meta.get(f"{arch}.vocab_size") or len(meta["tokenizer.ggml.tokens"])
    head_dim = int(meta.get(f"{arch}.attention.key_length") or hidden // num_heads)
    rope_scaling = None
    if meta.get(f"{arch}.rope.scaling.type") == "linear":
        rope_scaling = {"rope_type": "linear", "factor": float(meta[f"{arch}.rope.scaling.factor"])}
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(meta[f"{arch}.feed_forward_length"]),
        num_layers=int(meta[f"{arch}.block_count"]),
        num_heads=num_heads,
        num_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv") or num_heads),
        head_dim=head_dim,
        rms_norm_eps=float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        rope_scaling=rope_scaling,
        max_position_embeddings=int(meta.get(f"{arch}.context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias=arch == "qwen2",
        architecture="Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM",
    )


def _iter_tensors(reader: GGUFReader, cfg: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":  # llama3 scaling factors, recomputed from the config instead
            continue
        if t.name in _GLOBAL_NAMES:
            name = _GLOBAL_NAMES[t.name]
        else:
            m = _BLOCK.fullmatch(t.name)
            if m is None or m.group(2) not in _LAYER_NAMES:
                raise ModelLoadError(f"unexpected GGUF tensor {t.name!r}")
            name = f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
        w = dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        if cfg.architecture == "LlamaForCausalLM":
            if name.endswith("q_proj.weight") or name.endswith("q_proj.bias"):
                w = unpermute_qk(w, cfg.num_heads)
            elif name.endswith("k_proj.weight") or name.endswith("k_proj.bias"):
                w = unpermute_qk(w, cfg.num_kv_heads)
        yield name, torch.from_numpy(np.require(w, dtype=np.float32, requirements=["C", "W"]))


def _tokenizer(meta: dict[str, Any]) -> Tokenizer:
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ModelLoadError(
            f"unsupported GGUF tokenizer {meta.get('tokenizer.ggml.model')!r} (need gpt2 BPE)"
        )
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    backend = tokenizers.Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if meta.get("tokenizer.ggml.pre") in ("smollm", "starcoder"):
        # these pre-tokenizers split digits one by one before the GPT-2 regex
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    types = meta.get("tokenizer.ggml.token_type") or []
    special = [
        tokenizers.AddedToken(tokens[i], special=True, normalized=False)
        for i, kind in enumerate(types)
        if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
    ]
    backend.add_special_tokens(special)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    return Tokenizer(
        backend,
        eos_token_id=int(meta["tokenizer.ggml.eos_token_id"]),
        bos_token_id=None if bos is None else int(bos),
        chat_template=meta.get("tokenizer.chat_template"),
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
    )
