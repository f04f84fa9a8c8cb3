"""A Llama-family decoder over a flat token batch and a paged KV cache.

Covers Llama 1-3, SmolLM2, Mistral (a sliding window on every layer) and Qwen2 (qkv bias) through
``ModelConfig``: grouped- and multi-query attention, tied embeddings, scaled RoPE.

``partition`` turns a built model into one rank's part of a tensor- and pipeline-parallel one
(``backends/engine/parallel/``): its heads, MLP columns and vocabulary slice, and its stage's layers.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from backends.engine.layers.activation import gated_activation
from backends.engine.layers.attention import AttentionBackend, AttentionMetadata, default_backend
from backends.engine.layers.gguf_blocks import QuantizedTensor
from backends.engine.layers.linear import MergedLinear
from backends.engine.layers.norm import RMSNorm
from backends.engine.layers.rotary import RotaryEmbedding
from backends.engine.model_config import ModelConfig
from backends.engine.parallel.group import ParallelGroup
from backends.engine.parallel.layers import (
    ColumnParallelLinear,
    ParallelLMHead,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from backends.engine.parallel.pipeline import (
    EmbeddingElsewhere,
    HeldElsewhere,
    head_stand_in,
    layer_stand_ins,
)


class LlamaAttention(nn.Module):
    """``is_sliding``: this layer reads the step's windowed view (``AttentionMetadata.view``)."""

    def __init__(
        self,
        cfg: ModelConfig,
        rotary: RotaryEmbedding,
        backend: AttentionBackend,
        *,
        is_sliding: bool = False,
    ) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = MergedLinear(
            cfg.hidden_size, [self.q_size, self.kv_size, self.kv_size], bias=cfg.attention_bias
        )
        self.o_proj = MergedLinear(self.q_size, [cfg.hidden_size])
        self.rotary = rotary
        self.backend = backend
        self.is_sliding = is_sliding
        self.scale = (cfg.query_pre_attn_scalar or cfg.head_dim) ** -0.5
        self.k_cache = torch.empty(0)  # bound by the model runner to [num_slots, kv_heads, head_dim]
        self.v_cache = torch.empty(0)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        qkv = self.qkv_proj(x)
        rotated = self.rotary.rotate_in_place(positions, qkv, self.num_heads + self.num_kv_heads)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if not rotated:  # else q and k are views into q|k|v, rotated in place
            q, k = self.rotary(positions, q, k)
        return self.attend(q, k, v, meta)

    def split_heads(self, group: ParallelGroup) -> None:
        """Keep this tensor rank's query heads and the KV heads they read (``ParallelLayout.split_heads``):
        q|k|v column-parallel, o_proj row-parallel."""
        split = group.layout.split_heads(self.num_heads, self.num_kv_heads, group.tp_rank)
        hidden_size, d = self.qkv_proj.in_features, self.head_dim
        self.num_heads, self.num_kv_heads = split.num_heads, split.num_kv_heads
        self.q_size, self.kv_size = split.num_heads * d, split.num_kv_heads * d
        kv_start = split.first_kv_head * d
        self.qkv_proj = ColumnParallelLinear(
            hidden_size,
            [self.q_size, self.kv_size, self.kv_size],
            [split.first_head * d, kv_start, kv_start],
            bias=self.qkv_proj.bias is not None,
        )
        self.o_proj = RowParallelLinear(self.q_size * group.tp_size, hidden_size, group)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Paged attention over this layer's view of the step, then the output projection."""
        view = meta.view(self.is_sliding)
        o = self.backend.forward(q, k, v, self.k_cache, self.v_cache, view, self.scale)
        return self.o_proj(o.reshape(-1, self.q_size))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        size = cfg.intermediate_size
        self.gate_up_proj = MergedLinear(cfg.hidden_size, [size, size], bias=cfg.mlp_bias)
        self.down_proj = MergedLinear(size, [cfg.hidden_size], bias=cfg.mlp_bias)
        self.act = gated_activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))

    def split_columns(self, group: ParallelGroup) -> None:
        """Keep this tensor rank's share of the MLP columns: gate|up column-parallel, down row-parallel."""
        size = self.gate_up_proj.out_sizes[0] // group.tp_size
        hidden_size, start = self.gate_up_proj.in_features, group.tp_rank * size
        has_bias = self.gate_up_proj.bias is not None
        self.gate_up_proj = ColumnParallelLinear(hidden_size, [size, size], [start, start], bias=has_bias)
        self.down_proj = RowParallelLinear(size * group.tp_size, hidden_size, group, bias=has_bias)


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        rotary: RotaryEmbedding,
        backend: AttentionBackend,
        *,
        is_sliding: bool = False,
    ) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(cfg, rotary, backend, is_sliding=is_sliding)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, positions: torch.Tensor, h: torch.Tensor, residual: torch.Tensor | None, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's MLP output, the residual stream before it is added): the add happens in the
        next norm (``RMSNorm.add_and_norm``), one pass with it. ``residual`` None: h is the embedding."""
        if residual is None:
            residual, x = h, self.input_layernorm(h)
        else:
            x, residual = self.input_layernorm.add_and_norm(h, residual)
        x, residual = self.post_attention_layernorm.add_and_norm(self.self_attn(positions, x, meta), residual)
        return self.mlp(x), residual


class LlamaForCausalLM(nn.Module):
    """forward() gives hidden states of every token; compute_logits() only for the rows asked.

    Other decoders of the same shape (Gemma 3) subclass it and override ``build_layers`` and
    ``build_norm``, keeping the weight loading, prepacking and LM head.
    """

    # checkpoint name fragment -> (merged module name fragment, shard index)
    STACKED = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
        "o_proj": ("o_proj", 0),
        "down_proj": ("down_proj", 0),
    }

    def __init__(
        self, cfg: ModelConfig, *, backend: AttentionBackend | None = None, max_position: int | None = None
    ) -> None:
        super().__init__()
        self.config = cfg
        backend = backend or default_backend(torch.get_default_device())
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(
            self.build_layers(cfg, backend, max_position or cfg.max_position_embeddings)
        )
        self.norm = self.build_norm(cfg)
        self.lm_head = MergedLinear(cfg.hidden_size, [cfg.vocab_size])
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight  # type: ignore[assignment]

    def build_layers(self, cfg: ModelConfig, backend: AttentionBackend, max_position: int) -> list[nn.Module]:
        rotary = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling)
        return [
            LlamaDecoderLayer(cfg, rotary, backend, is_sliding=cfg.is_sliding(i))
            for i in range(cfg.num_layers)
        ]

    def build_norm(self, cfg: ModelConfig) -> nn.Module:
        return RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        h, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            h, residual = layer(positions, h, residual, meta)
        assert isinstance(self.norm, RMSNorm), "a subclass with another norm has its own forward"
        if residual is None:  # no layers
            return self.norm(h)
        return self.norm.add_and_norm(h, residual)[0]

    def partition(self, group: ParallelGroup) -> None:
        """Make this model ``group``'s rank's part, before its weights load: with tensor ranks, its
        heads, MLP columns and vocabulary slice (embedding and LM head); with pipeline stages, stand-ins
        (``parallel/pipeline.py``) for the layers, embedding and LM head other stages hold."""
        cfg = self.config
        if group.tp_size > 1:
            for module in list(self.modules()):
                if isinstance(module, LlamaAttention):
                    module.split_heads(group)
                elif isinstance(module, LlamaMLP):
                    module.split_columns(group)
            self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, group)  # type: ignore[assignment]
        if group.is_last_stage:
            self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size, group)
            if cfg.tie_word_embeddings:  # the last stage keeps the embedding as its LM head's weight
                self.lm_head.weight = self.embed_tokens.weight  # type: ignore[assignment]
        else:
            self.lm_head = head_stand_in(cfg.vocab_size, group)  # type: ignore[assignment]
        if not group.is_first_stage and not (group.is_last_stage and cfg.tie_word_embeddings):
            self.embed_tokens = EmbeddingElsewhere(cfg.hidden_size)  # type: ignore[assignment]
        for i, stand_in in layer_stand_ins(len(self.layers), group).items():
            self.layers[i] = stand_in

    def prepack(self, batch_hint: int) -> int:
        """Reorder every linear weight for the CPU's fast GEMM path; returns how many were packed."""
        tied = self.config.tie_word_embeddings
        return sum(
            module.prepack(batch_hint, keep_dense=tied and module is self.lm_head)
            for module in self.modules()
            if isinstance(module, MergedLinear)
        )

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor | QuantizedTensor]]) -> None:
        """Copy HF-named tensors (``model.layers.0.self_attn.q_proj.weight``...) into the merged layers,
        which keep GGUF blocks as they are (``MergedLinear.load_shard``)."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for hf_name, tensor in weights:
            name = hf_name.removeprefix("model.")
            if "rotary_emb" in name:
                continue
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            if self._held_elsewhere(name):  # another pipeline stage's weight
                continue
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in self.STACKED:
                merged, shard = self.STACKED[parts[-2]]
                module_name = ".".join([*parts[:-2], merged])
                module = self.get_submodule(module_name)
                assert isinstance(module, MergedLinear)
                module.load_shard(shard, parts[-1], tensor)
                loaded.add(f"{module_name}.{parts[-1]}")
                continue
            owner = getattr(self, parts[0], None)
            if isinstance(owner, VocabParallelEmbedding | ParallelLMHead):  # keeps its vocabulary slice
                owner.load_shard(0, parts[-1], tensor)
                loaded.add(name)
                continue
            if name not in params:
                raise KeyError(f"unexpected weight {hf_name!r}")
            if isinstance(tensor, QuantizedTensor):  # only merged layers keep blocks
                tensor = tensor.dequantize()
            if params[name].shape != tensor.shape:
                raise ValueError(
                    f"{hf_name}: expected {tuple(params[name].shape)}, got {tuple(tensor.shape)}"
                )
            params[name].data.copy_(tensor)
            loaded.add(name)
        missing = {n for n in params if n not in loaded}
        if self.config.tie_word_embeddings:
            missing.discard("lm_head.weight")
        if missing:
            raise KeyError(f"weights missing from the checkpoint: {sorted(missing)[:5]}")

    def _held_elsewhere(self, name: str) -> bool:
        """Whether weight ``name`` belongs to a part of the model another pipeline stage holds."""
        module: nn.Module | None = self
        for part in name.split(".")[:-1]:
            module = getattr(module, part, None)
            if module is None or isinstance(module, HeldElsewhere):
                return module is not None
        return False
