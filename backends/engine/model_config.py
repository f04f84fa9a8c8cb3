"""The architecture of a Llama-family or Gemma 3 model, read from a HF config.json or GGUF metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.engine.errors import ModelLoadError

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM")
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")
"""MLP gate activations: SwiGLU (Llama family) and GeGLU with tanh GELU (Gemma)."""
SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and flags of a Llama-family decoder (Qwen2 and Mistral are flags on it) or a Gemma 3 one
    (``architecture`` "Gemma3ForCausalLM": its extra norms and scaled embeddings are implied)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    """HF rope parameters beyond theta: {"rope_type": "llama3" | "linear" | "yarn", "factor": ...}."""
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    """Bias on q, k and v projections (Qwen2)."""
    mlp_bias: bool = False
    sliding_window: int | None = None
    """The attention window of the sliding layers: a query at position p sees keys in (p - window, p], as
    transformers masks them (None: every layer attends fully)."""
    layer_types: tuple[str, ...] | None = None
    """Per-layer attention as transformers names it ("sliding_attention" / "full_attention"), when the
    config gives or implies one; None with a window means every layer slides (Mistral)."""
    architecture: str = "LlamaForCausalLM"
    hidden_act: str = "silu"
    """The MLP's gate activation, one of ``ACTIVATIONS``."""
    rope_local_theta: float | None = None
    """RoPE base of the sliding layers where it differs from the full layers' ``rope_theta`` (Gemma 3:
    10000 locally, 1e6 globally); None: every layer uses ``rope_theta`` (and ``rope_scaling``)."""
    query_pre_attn_scalar: float | None = None
    """Attention scores are scaled by this ** -0.5 (Gemma); None: by head_dim ** -0.5."""
    final_logit_softcapping: float | None = None
    """Logits become cap * tanh(logits / cap) (Gemma 2 style); None: no capping."""

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelConfig:
        arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelLoadError(f"unsupported architecture {arch!r}; supported: {SUPPORTED_ARCHITECTURES}")
        if arch == "Gemma3ForCausalLM":
            return _gemma3_from_hf(cfg)
        if cfg.get("hidden_act", "silu") != "silu":
            raise ModelLoadError(f"unsupported hidden_act {cfg.get('hidden_act')!r}")
        num_heads = cfg["num_attention_heads"]
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope_theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        window, layer_types = _sliding_window(cfg, arch)
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=None if rope_type == "default" else {**rope, "rope_type": rope_type},
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", arch == "Qwen2ForCausalLM")),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_window=window,
            layer_types=layer_types,
            architecture=arch,
        )

    def check_servable(self, max_model_len: int) -> None:
        """Raise ModelLoadError if serving ``max_model_len`` tokens needs attention the engine lacks."""
        window = self.sliding_window
        if window is None or window >= max_model_len:
            return  # no window, or one that never bites: full attention is exact
        fix = f"(max_model_len is {max_model_len}); set max_model_len <= {window} to serve it exactly"
        if self.architecture == "LlamaForCausalLM":
            # transformers' Llama ignores sliding_window while Mistral applies it: refuse to guess
            raise ModelLoadError(
                f"sliding_window={window} in config.json of a LlamaForCausalLM: transformers' Llama ignores "
                "the window, Mistral applies it; set architectures to MistralForCausalLM to slide every "
                f"layer, or drop sliding_window for full attention {fix}"
            )
        if (
            self.architecture == "MistralForCausalLM"
            and self.layer_types is not None
            and FULL in self.layer_types
        ):
            # transformers' Mistral slides every layer whatever layer_types says; Ministral honours them
            raise ModelLoadError(
                f"sliding_window={window} in config.json of a MistralForCausalLM whose layer_types names "
                "full_attention layers: transformers' Mistral slides every layer anyway, Ministral "
                f"would not; drop layer_types to slide every layer {fix}"
            )

    def is_sliding(self, layer: int) -> bool:
        """Whether attention layer ``layer`` applies ``sliding_window``."""
        if self.sliding_window is None:
            return False
        return self.layer_types is None or self.layer_types[layer] == SLIDING

    def attention_window(self, max_model_len: int) -> int | None:
        """The window the sliding layers apply when serving ``max_model_len`` tokens; None when it never
        bites (so the plain causal fast path runs). Full layers of a mixed model (Gemma 3, Qwen2 past
        max_window_layers) still see everything. Call after ``check_servable``."""
        window = self.sliding_window
        return window if window is not None and window < max_model_len else None


def _gemma3_from_hf(cfg: dict[str, Any]) -> ModelConfig:
    """transformers' Gemma3TextConfig (model_type gemma3_text), with its defaults where keys are absent."""
    if cfg.get("attn_logit_softcapping") is not None:
        raise ModelLoadError("attn_logit_softcapping is not supported (Gemma 3 sets none)")
    if cfg.get("use_bidirectional_attention"):
        raise ModelLoadError("use_bidirectional_attention is not supported (a causal decoder only)")
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ModelLoadError(f"unsupported hidden_activation {act!r} for Gemma 3")
    num_layers = cfg["num_hidden_layers"]
    layer_types = cfg.get("layer_types") or gemma3_layer_types(
        num_layers, cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or 6
    )
    full_rope, local_rope = _gemma3_rope(cfg)
    full_type = full_rope.pop("rope_type", full_rope.pop("type", "default"))
    if local_rope.get("rope_type", local_rope.get("type", "default")) != "default":
        raise ModelLoadError("scaled RoPE on Gemma 3's sliding layers is not supported")
    window = cfg.get("sliding_window", 4096)
    sliding = window is not None and SLIDING in layer_types
    num_heads = cfg["num_attention_heads"]
    return ModelConfig(
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
        head_dim=cfg.get("head_dim") or 256,
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(full_rope.pop("rope_theta")),
        rope_scaling=None if full_type == "default" else {**full_rope, "rope_type": full_type},
        rope_local_theta=float(local_rope["rope_theta"]),
        max_position_embeddings=cfg.get("max_position_embeddings", 131072),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        sliding_window=int(window) if sliding else None,
        layer_types=tuple(layer_types) if sliding else None,
        architecture="Gemma3ForCausalLM",
        hidden_act="gelu_pytorch_tanh",
        query_pre_attn_scalar=float(cfg.get("query_pre_attn_scalar", 256)),
        final_logit_softcapping=cfg.get("final_logit_softcapping"),
    )


def gemma3_layer_types(num_layers: int, pattern: int = 6) -> list[str]:
    """transformers' reading of Gemma 3's interleave: every ``pattern``-th layer is full (5, 11, 17...)."""
    return [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]


def _gemma3_rope(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """RoPE parameters of the full and the sliding layers: transformers 5's per-layer-type
    ``rope_parameters``, or the older ``rope_theta``/``rope_local_base_freq``/``rope_scaling`` keys."""
    params = cfg.get("rope_parameters") or {}
    if FULL in params or SLIDING in params:
        full, local = dict(params.get(FULL) or {}), dict(params.get(SLIDING) or {})
    else:
        full, local = dict(cfg.get("rope_scaling") or {}), {}
    full.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
    local.setdefault("rope_theta", cfg.get("rope_local_base_freq", 10_000.0))
    return full, local


def _sliding_window(cfg: dict[str, Any], arch: str) -> tuple[int | None, tuple[str, ...] | None]:
    """The window transformers would apply to some layer of this config (None if it applies none) and the
    per-layer attention types where the config names or implies them."""
    window = cfg.get("sliding_window")
    if window is None:
        return None, None
    layer_types = cfg.get("layer_types")
    if arch == "Qwen2ForCausalLM":
        # Qwen2 slides only with use_sliding_window (off by default), and only layers >= max_window_layers
        if not cfg.get("use_sliding_window", False):
            return None, None
        if layer_types is None:
            first_sliding = cfg.get("max_window_layers", 28)
            layer_types = [
                "sliding_attention" if i >= first_sliding else "full_attention"
                for i in range(cfg["num_hidden_layers"])
            ]
    elif cfg.get("use_sliding_window") is False:
        return None, None
    elif arch == "MistralForCausalLM":
        # transformers' Mistral slides every layer whatever layer_types says (Ministral honours them):
        # keep them, so check_servable refuses any that name a full layer rather than guess
        return int(window), None if layer_types is None else tuple(layer_types)
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None, None  # transformers 5 names each layer's attention: none of these slides
    return int(window), None if layer_types is None else tuple(layer_types)
