"""A model's GEMMs in their serving form (``layers/quantization.py``); ``quantize_linears`` on a whole
model is in test_int8.py and test_int4.py."""

from __future__ import annotations

import pytest
import torch

from backends.engine.layers.quantization import prepare_linears, quantize_linears
from tests.backends.engine.layers.test_gguf_blocks import Q4, merged_layer


def test_runner_without_quantization_dequantizes_blocks_at_load() -> None:
    """``prepare_linears(model, None)`` (the runner's start) leaves no block for the first step to undo."""
    layer, ref = merged_layer([Q4[0]] * 3)
    layer.prepack(batch_hint=16)
    assert prepare_linears(torch.nn.Sequential(layer), None) is None
    assert not layer._blocks and not layer.is_quantized
    assert torch.equal(layer.dense_weight(), ref)


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="int2"):
        quantize_linears(torch.nn.Sequential(), "int2")
