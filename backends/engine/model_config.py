"""The architecture of a Llama-family model, read from a HF config.json or GGUF metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.engine.errors import ModelLoadError

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and flags of a Llama-family decoder (Qwen2 and Mistral are flags on it)."""

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

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelConfig:
        arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelLoadError(f"unsupported architecture {arch!r}; supported: {SUPPORTED_ARCHITECTURES}")
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
        if self.layer_types is not None and "full_attention" in self.layer_types:
            raise ModelLoadError(
                f"sliding_window={window} in config.json but layer_types names full_attention layers: "
                f"only a window on every layer is supported, per-layer windows are not yet {fix}"
            )

    def attention_window(self, max_model_len: int) -> int | None:
        """The window every layer applies when serving ``max_model_len`` tokens; None when it never bites
        (so the plain causal fast path runs). Call after ``check_servable``."""
        window = self.sliding_window
        return window if window is not None and window < max_model_len else None

    def kv_bytes_per_token(self, dtype_size: int) -> int:
        """Bytes of K plus V for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_size


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
