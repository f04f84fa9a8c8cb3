"""``--kv-cache-dtype int8|fp8`` through the engine on tiny random models: the budget holds more blocks,
and greedy output stays close to the unquantized cache through chunked prefill, prefix hits, preemption,
sliding windows and two KV groups (the fixture checks every pool's accounting after each test)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backends.engine.kernels import cpu_decode
from backends.engine.kv_sizing import kv_bytes_per_token
from backends.engine.layers import kv_quant
from backends.engine.model_config import ModelConfig
from backends.engine.outputs import RequestOutput
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.test_engine_vs_hf import random_prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=1)
BUDGET = 4 << 20
# Random tiny models have nearly flat logits, so greedy paths part on near-ties; along the common path
# the chosen tokens' logprobs must agree within TOLERANCE, and at least AGREEMENT of all tokens come
# before the first parting (measured: int8 0.53-1.0, fp8 0.19-0.9; the real model's figures are in
# test_kv_cache_dtype_smollm2.py).
TOLERANCE = {"int8": 0.05, "fp8": 0.25}
AGREEMENT = {"int8": 0.5, "fp8": 0.15}
SMOLLM2 = ModelConfig(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
)


def assert_close_to_auto(auto: list[RequestOutput], quant: list[RequestOutput], kv: str) -> None:
    agree = total = 0
    for a, q in zip(auto, quant, strict=True):
        ta, tq = a.outputs[0].token_ids, q.outputs[0].token_ids
        assert len(ta) == len(tq)
        n = next((i for i, (x, y) in enumerate(zip(ta, tq, strict=True)) if x != y), len(ta))
        la = [chosen.logprob for chosen, _ in a.outputs[0].logprobs or []]
        lq = [chosen.logprob for chosen, _ in q.outputs[0].logprobs or []]
        assert lq[:n] == pytest.approx(la[:n], abs=TOLERANCE[kv])
        agree, total = agree + n, total + len(ta)
    assert agree >= AGREEMENT[kv] * total, f"{kv}: greedy agreement {agree}/{total}"


def test_bytes_per_token_count_codes_and_scales() -> None:
    """SmolLM2-135M: 30 layers x 3 kv heads x (K, V) rows of 64 elements, plus 4 scale bytes a row."""
    assert kv_bytes_per_token(SMOLLM2, torch.float32) == 46080
    assert kv_bytes_per_token(SMOLLM2, torch.bfloat16) == 23040
    for kv in ("int8", "fp8"):
        assert kv_bytes_per_token(SMOLLM2, torch.bfloat16, kv) == 2 * 30 * 3 * 68 == 12240
        assert kv_bytes_per_token(SMOLLM2, torch.float32, kv) == 12240


@pytest.mark.parametrize("kv", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_same_budget_holds_more_blocks(kv: str, dtype: str, make_engine: EngineFactory) -> None:
    auto = make_engine("gqa", dtype=dtype)
    quant = make_engine("gqa", dtype=dtype, kv_cache_dtype=kv)
    cfg = quant.model_config  # 2 layers, 2 kv heads, head_dim 16
    dtype_bytes = 4 if dtype == "float32" else 2
    block_bytes = 2 * cfg.num_layers * cfg.num_kv_heads * (cfg.head_dim + 4) * 16
    assert quant.block_manager.num_blocks == BUDGET // block_bytes
    ratio = quant.block_manager.num_blocks / auto.block_manager.num_blocks
    assert ratio == pytest.approx(cfg.head_dim * dtype_bytes / (cfg.head_dim + 4), rel=0.01)
    k_cache, v_cache = quant.runner.k_cache, quant.runner.v_cache
    assert k_cache.dtype == kv_quant.STORAGE_DTYPES[kv]
    assert k_cache.shape[-1] == cfg.head_dim + kv_quant.SCALE_BYTES
    assert k_cache.nbytes + v_cache.nbytes <= BUDGET


CASES: list[tuple[str, dict[str, Any]]] = [
    ("gqa", {}),
    ("gqa", {"max_num_batched_tokens": 7}),  # chunked prefill: later chunks read their context
    ("mqa", {"dtype": "bfloat16"}),
    ("mistral_window8", {}),  # every layer slides, passed blocks freed
    ("gemma3_window8", {}),  # two KV groups
    ("gemma3_window20", {"max_num_batched_tokens": 13}),  # two groups, chunks read the sliding window
]


@pytest.mark.parametrize("kv", ["int8", "fp8"])
@pytest.mark.parametrize(("variant", "opts"), CASES, ids=[f"{v}-{'-'.join(o) or 'plain'}" for v, o in CASES])
def test_greedy_stays_close_to_the_unquantized_cache(
    kv: str, variant: str, opts: dict[str, Any], make_engine: EngineFactory
) -> None:
    prompts = random_prompts(6, 20, 90, seed=11)
    auto = make_engine(variant, **opts).generate(prompts, GREEDY)
    quant = make_engine(variant, kv_cache_dtype=kv, **opts).generate(prompts, GREEDY)
    assert_close_to_auto(auto, quant, kv)


@pytest.mark.parametrize("kv", ["int8", "fp8"])
@pytest.mark.parametrize("variant", ["gqa", "gemma3_window8"])
def test_prefix_hits_read_the_quantized_prefix(kv: str, variant: str, make_engine: EngineFactory) -> None:
    shared = random_prompts(1, 64, 64, seed=5)[0]  # four full blocks
    prompts = [shared + tail for tail in random_prompts(4, 3, 20, seed=6)]
    outputs: dict[str, list[RequestOutput]] = {}
    for name in ("auto", kv):
        engine = make_engine(variant, kv_cache_dtype=name)
        first = engine.generate(prompts[:1], GREEDY)  # caches the shared blocks
        outputs[name] = first + engine.generate(prompts[1:], GREEDY)
        assert engine.block_manager.prefix_cache_hits >= 3 * 4
    assert_close_to_auto(outputs["auto"], outputs[kv], kv)


@pytest.mark.parametrize("kv", ["int8", "fp8"])
@pytest.mark.parametrize("variant", ["gqa", "gemma3_window20"])
def test_preemption_with_a_quantized_cache(kv: str, variant: str, make_engine: EngineFactory) -> None:
    prompts = random_prompts(4, 35, 45, seed=32)  # each grows to about 110 tokens: 7 blocks
    cfg = make_engine(variant).model_config
    budget = 12 * 16 * kv_bytes_per_token(cfg, torch.float32, kv)  # 12 blocks for 28 wanted
    params = SamplingParams(temperature=0.0, max_tokens=70, ignore_eos=True, logprobs=1)
    opts: dict[str, Any] = {"max_num_seqs": 4, "max_num_batched_tokens": 32}
    engine = make_engine(variant, kv_cache_dtype=kv, kv_cache_bytes=budget, **opts)
    quant = engine.generate(prompts, params)
    assert engine.stats().num_preemptions > 0
    auto = make_engine(variant, **opts).generate(prompts, params)  # room for all: no preemption
    assert_close_to_auto(auto, quant, kv)


@pytest.mark.parametrize("kv", ["int8", "fp8"])
def test_the_torch_decode_path_reads_the_same_codes_as_the_kernel(
    kv: str, make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the native kernel, decodes gather and dequantize whole blocks: the same greedy tokens up
    to rounding (both read the same codes and scales)."""
    prompts = random_prompts(4, 20, 60, seed=12)
    kernel = make_engine("mistral_window20", kv_cache_dtype=kv).generate(prompts, GREEDY)
    monkeypatch.setenv("SORTYARD_CPU_KERNELS", "0")
    cpu_decode.load.cache_clear()
    try:
        engine = make_engine("mistral_window20", kv_cache_dtype=kv)
        assert all(layer.backend.decode_kernel is None for layer in _attention_layers(engine))
        torch_path = engine.generate(prompts, GREEDY)
    finally:
        monkeypatch.delenv("SORTYARD_CPU_KERNELS")
        cpu_decode.load.cache_clear()
    for a, b in zip(kernel, torch_path, strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        la = [chosen.logprob for chosen, _ in a.outputs[0].logprobs or []]
        lb = [chosen.logprob for chosen, _ in b.outputs[0].logprobs or []]
        assert la == pytest.approx(lb, abs=1e-4)


def _attention_layers(engine: Any) -> list[Any]:
    from backends.engine.models.llama import LlamaAttention

    return [m for m in engine.runner.model.modules() if isinstance(m, LlamaAttention)]
