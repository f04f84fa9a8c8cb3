"""The real SmolLM2-135M-Instruct in bf16 with its GEMM weights prepacked for oneDNN (slow: ~15 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.layers.linear import MergedLinear, _is_packable
from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine() -> Iterator[LLMEngine]:
    num_threads = torch.get_num_threads()
    engine = LLMEngine(
        EngineConfig(model="smollm2-135m", dtype="bfloat16", kv_cache_bytes=64 << 20, device="cpu")
    )
    yield engine
    engine.check_invariants()
    torch.set_num_threads(num_threads)


def test_every_gemm_weight_is_packed_where_onednn_has_bf16_kernels(engine: LLMEngine) -> None:
    if not _is_packable(torch.bfloat16):
        pytest.skip("oneDNN has no bf16 kernels for this CPU: bf16 stays unpacked")
    layers = [m for m in engine.runner.model.modules() if isinstance(m, MergedLinear)]

    assert layers and all(m._packed is not None for m in layers)
    assert all(m.dense_weight().dtype == torch.bfloat16 for m in layers)


def test_capital_of_france(engine: LLMEngine) -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = engine.tokenizer.apply_chat_template(messages)
    out = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=16))[0]

    assert out.outputs[0].text == "The capital of France is Paris."
    assert out.outputs[0].finish_reason == "stop"
