"""The quality gate of ``--quantization int8`` and ``int4``: perplexity of the real SmolLM2-135M on a fixed
public-domain text (Pride and Prejudice, chapter 1) within 1% of fp32 for int8, 5% for int4 (slow: ~20 s
each)."""

from __future__ import annotations

import math

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.layers.attention import AttentionMetadata, PrefillChunk
from backends.engine.layers.linear import MergedLinear
from backends.engine.layers.quantization import quantize_linears
from backends.engine.llm_engine import LLMEngine
from tools.engine_quality import TEXT

pytestmark = pytest.mark.slow


def perplexity(engine: LLMEngine, token_ids: list[int]) -> float:
    """exp(mean next-token NLL) over the text, as one prefill of the whole sequence."""
    n = len(token_ids)
    meta = AttentionMetadata(slot_mapping=torch.arange(n), block_size=engine.config.block_size)
    meta.prefills.append(PrefillChunk(0, n, 0, None))
    model = engine.runner.model
    with torch.inference_mode():
        hidden = model(torch.tensor(token_ids), torch.arange(n), meta)
        logits = model.compute_logits(hidden).float()
    nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(token_ids[1:]))
    return math.exp(nll.item())


def test_int8_perplexity_within_one_percent_of_fp32() -> None:
    num_threads = torch.get_num_threads()
    engine = LLMEngine(EngineConfig(model="smollm2-135m", kv_cache_bytes=64 << 20, device="cpu"))
    try:
        bos = engine.tokenizer.bos_token_id
        assert bos is not None
        token_ids = [bos, *engine.tokenizer.encode(TEXT.read_text())]
        assert 1000 <= len(token_ids) <= 2048
        fp32 = perplexity(engine, token_ids)
        sizes = quantize_linears(engine.runner.model)
        int8 = perplexity(engine, token_ids)
    finally:
        torch.set_num_threads(num_threads)
    print(f"perplexity fp32 {fp32:.4f} int8 {int8:.4f}; GEMM weights {sizes}")
    assert fp32 < 30  # the text is ordinary English: a broken model would be far above
    assert sizes.quantized_bytes < sizes.float_bytes / 3.9
    assert abs(int8 - fp32) / fp32 < 0.01


def test_int4_perplexity_within_five_percent_of_fp32() -> None:
    """Both int4 paths: the GGUF's own Q4_1 values packed as they are (``quantization="int4"`` at load),
    and int4 requantized from the dequantized fp32 weights (``quantize_linears`` afterwards)."""
    num_threads = torch.get_num_threads()
    config = EngineConfig(model="smollm2-135m", kv_cache_bytes=64 << 20, device="cpu")
    engine = LLMEngine(config)
    direct = LLMEngine(EngineConfig(**{**vars(config), "quantization": "int4"}))
    try:
        bos = engine.tokenizer.bos_token_id
        assert bos is not None
        token_ids = [bos, *engine.tokenizer.encode(TEXT.read_text())]
        fp32 = perplexity(engine, token_ids)
        int4_gguf = perplexity(direct, token_ids)
        direct_bytes = direct.runner.weight_bytes
        # the file's weights (q and k rows unpermuted in their blocks), up to the bf16 scales and zeros
        for name in ("self_attn.qkv_proj", "mlp.down_proj"):
            ref = engine.runner.model.layers[0].get_submodule(name)
            got = direct.runner.model.layers[0].get_submodule(name)
            assert isinstance(ref, MergedLinear) and isinstance(got, MergedLinear) and got.is_int4
            ref_w = ref.dense_weight()
            assert (got.dense_weight() - ref_w).abs().max() <= ref_w.abs().max() * 2**-7
        requantized_bytes = quantize_linears(engine.runner.model, "int4")
        int4_float = perplexity(engine, token_ids)
    finally:
        torch.set_num_threads(num_threads)
    print(
        f"perplexity fp32 {fp32:.4f} int4 from GGUF blocks {int4_gguf:.4f} int4 from floats "
        f"{int4_float:.4f}; GEMM weights {direct_bytes}, {requantized_bytes}"
    )
    assert direct_bytes is not None and direct_bytes.method == "int4"
    assert direct_bytes.float_bytes == requantized_bytes.float_bytes
    assert direct_bytes.quantized_bytes == requantized_bytes.quantized_bytes < direct_bytes.float_bytes / 6.3
    assert abs(int4_gguf - fp32) / fp32 < 0.05
    assert abs(int4_float - fp32) / fp32 < 0.05
