"""Weight-only quantization of the decoder GEMMs: a model's ``MergedLinear`` layers in their serving form.

Methods (``--quantization``): ``int8`` (``int8.py``, per output channel) and ``int4`` (``int4.py``, per
group of 32 input columns, asymmetric). Both compute their weights at load from the float weights, except
where a GGUF's GEMM weights are Q4_0 or Q4_1 (``gguf_blocks.py``): int4 packs the very values the file
holds, and without quantization the blocks are dequantized once, at load.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from backends.engine.layers.linear import MergedLinear


@dataclass(frozen=True, slots=True)
class WeightBytes:
    """Bytes of the GEMM weights quantized by one ``quantize_linears`` call: in their float dtype, and
    quantized (values plus scales, and zeros for int4)."""

    method: str
    """"int8" or "int4"."""
    float_bytes: int
    quantized_bytes: int


def quantize_linears(model: nn.Module, method: str = "int8") -> WeightBytes:
    """Every decoder GEMM (q|k|v, o, gate|up, down) to ``method``: "int8" (per output channel) or "int4"
    (per group of 32 input columns; GGUF Q4_0 / Q4_1 blocks keep their values). The LM head
    (``model.lm_head``, which may be the tied embedding) stays as it is; layers already quantized are
    skipped."""
    if method not in ("int8", "int4"):
        raise ValueError(f"unknown quantization {method!r}")
    float_bytes = quantized_bytes = 0
    for module in model.modules():
        if isinstance(module, MergedLinear) and module is not model.lm_head and not module.is_quantized:
            float_bytes += module.num_float_weight_bytes
            quantized_bytes += module.quantize_int8() if method == "int8" else module.quantize_int4()
    return WeightBytes(method, float_bytes, quantized_bytes)


def prepare_linears(model: nn.Module, quantization: str | None) -> WeightBytes | None:
    """The GEMMs in their serving form: quantized (``quantize_linears``, returns the bytes), or without
    quantization, weights still in GGUF blocks dequantized (and prepacked) now, at load, rather than in
    the first step (returns None)."""
    if quantization is not None:
        return quantize_linears(model, quantization)
    for module in model.modules():
        if isinstance(module, MergedLinear):
            module.dequantize_blocks()
    return None
