"""One module per architecture family; ``build_model`` picks the class a ``ModelConfig`` names."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from backends.engine.model_config import ModelConfig
from backends.engine.models.gemma3 import Gemma3ForCausalLM
from backends.engine.models.llama import LlamaForCausalLM

if TYPE_CHECKING:
    from backends.engine.loader import LoadedModel

MODEL_CLASSES: dict[str, type[LlamaForCausalLM]] = {"Gemma3ForCausalLM": Gemma3ForCausalLM}
"""Architectures with their own class; every other supported one is a Llama with flags."""


def build_model(cfg: ModelConfig, *, max_position: int) -> LlamaForCausalLM:
    """An unloaded model for ``cfg.architecture`` (weights come from ``load_weights``)."""
    return MODEL_CLASSES.get(cfg.architecture, LlamaForCausalLM)(cfg, max_position=max_position)


def instantiate(
    loaded: LoadedModel, *, dtype: torch.dtype, device: torch.device, max_position: int, batch_hint: int
) -> LlamaForCausalLM:
    """``loaded``'s model on ``device`` in ``dtype`` with its weights, in eval mode, its GEMM weights
    prepacked for batches of about ``batch_hint`` rows."""
    with torch.device(device):
        model = build_model(loaded.model_config, max_position=max_position)
    model.to(dtype=dtype)
    model.load_weights((name, t.to(dtype)) for name, t in loaded.weights)
    model.eval()
    model.prepack(batch_hint)
    return model
