"""RoPE scaling variants compute the same inverse frequencies as transformers."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backends.engine.layers.rotary import compute_inv_freq

CASES: list[dict[str, Any]] = [
    {"rope_type": "default"},
    {"rope_type": "linear", "factor": 4.0},
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
]


@pytest.mark.parametrize("scaling", CASES, ids=lambda c: c["rope_type"])
def test_inv_freq_matches_transformers(scaling: dict[str, Any]) -> None:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        max_position_embeddings=16384,
        rope_parameters={**scaling, "rope_theta": 500000.0},
    )
    if scaling["rope_type"] == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        ref, ref_scale = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        ref, ref_scale = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu")
    ours, our_scale = compute_inv_freq(64, 500000.0, scaling)
    torch.testing.assert_close(ours, ref.float())
    assert our_scale == pytest.approx(ref_scale)


def test_unknown_rope_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="longrope"):
        compute_inv_freq(64, 10000.0, {"rope_type": "longrope", "factor": 2.0})
