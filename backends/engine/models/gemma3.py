"""Gemma 3's text decoder (Gemma 3 270M and the text stacks of the larger ones), as transformers'
``Gemma3ForCausalLM`` computes it.

What differs from Llama: embeddings scaled by sqrt(hidden) in the compute dtype; RMSNorm applied as
(1 + weight) in fp32; q and k normed per head before RoPE; four norms per layer (before and after
attention and MLP); GeGLU with tanh GELU; attention scaled by ``query_pre_attn_scalar`` ** -0.5; sliding
layers with their own RoPE base interleaved with full ones; optional final logit softcapping.
"""

from __future__ import annotations

import torch
from torch import nn

from backends.engine.layers.attention import AttentionBackend, AttentionMetadata
from backends.engine.layers.norm import GemmaRMSNorm
from backends.engine.layers.rotary import RotaryEmbedding
from backends.engine.model_config import ModelConfig
from backends.engine.models.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP


class Gemma3Attention(LlamaAttention):
    def __init__(
        self, cfg: ModelConfig, rotary: RotaryEmbedding, backend: AttentionBackend, *, is_sliding: bool
    ) -> None:
        super().__init__(cfg, rotary, backend, is_sliding=is_sliding)
        self.q_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = self.q_norm(q.view(-1, self.num_heads, self.head_dim))
        k = self.k_norm(k.view(-1, self.num_kv_heads, self.head_dim))
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        q, k = self.rotary(positions, q, k)
        return self.attend(q, k, v, meta)


class Gemma3DecoderLayer(nn.Module):
    def __init__(
        self, cfg: ModelConfig, rotary: RotaryEmbedding, backend: AttentionBackend, *, is_sliding: bool
    ) -> None:
        super().__init__()
        self.self_attn = Gemma3Attention(cfg, rotary, backend, is_sliding=is_sliding)
        self.mlp = LlamaMLP(cfg)
        size, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(size, eps)
        self.post_attention_layernorm = GemmaRMSNorm(size, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(size, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(size, eps)

    def forward(self, positions: torch.Tensor, h: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = h + self.post_attention_layernorm(self.self_attn(positions, self.input_layernorm(h), meta))
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


class Gemma3ForCausalLM(LlamaForCausalLM):
    """Loads HF names (``model.layers.0.pre_feedforward_layernorm.weight``...) through the Llama loader;
    the LM head is tied to the embeddings in every Gemma 3."""

    def build_layers(self, cfg: ModelConfig, backend: AttentionBackend, max_position: int) -> list[nn.Module]:
        # the full layers' RoPE (with any scaling) and the sliding layers' own, unscaled base
        full = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling)
        local_theta = cfg.rope_local_theta
        local = (
            full if local_theta is None else RotaryEmbedding(cfg.head_dim, max_position, local_theta, None)
        )
        layers: list[nn.Module] = []
        for i in range(cfg.num_layers):
            is_sliding = cfg.is_sliding(i)
            layers.append(
                Gemma3DecoderLayer(cfg, local if is_sliding else full, backend, is_sliding=is_sliding)
            )
        return layers

    def build_norm(self, cfg: ModelConfig) -> nn.Module:
        return GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        # sqrt(hidden) rounded to the compute dtype first, as transformers does (bf16: 25.25, not 25.298)
        h = h * torch.tensor(self.config.hidden_size**0.5, dtype=torch.float32).to(h.dtype)
        for layer in self.layers:
            h = layer(positions, h, meta)
        return self.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits
