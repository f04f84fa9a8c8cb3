"""One module per architecture family; ``build_model`` picks the class a ``ModelConfig`` names."""

from __future__ import annotations

from backends.engine.model_config import ModelConfig
from backends.engine.models.gemma3 import Gemma3ForCausalLM
from backends.engine.models.llama import LlamaForCausalLM

MODEL_CLASSES: dict[str, type[LlamaForCausalLM]] = {"Gemma3ForCausalLM": Gemma3ForCausalLM}
"""Architectures with their own class; every other supported one is a Llama with flags."""


def build_model(cfg: ModelConfig, *, max_position: int) -> LlamaForCausalLM:
    """An unloaded model for ``cfg.architecture`` (weights come from ``load_weights``)."""
    return MODEL_CLASSES.get(cfg.architecture, LlamaForCausalLM)(cfg, max_position=max_position)
