"""The real SmolLM2-135M-Instruct GGUF against transformers loading the same file (slow: ~30 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import smollm2_gguf_path
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.tiny import hf_generate_greedy
from tools.engine_quality import MESSAGES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine() -> Iterator[LLMEngine]:
    num_threads = torch.get_num_threads()
    engine = LLMEngine(EngineConfig(model="smollm2-135m", kv_cache_bytes=64 << 20, device="cpu"))
    yield engine
    engine.check_invariants()
    torch.set_num_threads(num_threads)


@pytest.fixture(scope="module")
def hf() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model, tokenizer


def test_capital_of_france(engine: LLMEngine) -> None:
    prompt = engine.tokenizer.apply_chat_template(MESSAGES[0])
    out = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=16))[0]
    assert out.outputs[0].text == "The capital of France is Paris."
    assert out.outputs[0].finish_reason == "stop"


def test_greedy_matches_transformers(engine: LLMEngine, hf: tuple[Any, Any]) -> None:
    model, _ = hf
    prompts = [engine.tokenizer.encode(engine.tokenizer.apply_chat_template(m)) for m in MESSAGES]
    outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=0))
    for prompt, out in zip(prompts, outs, strict=True):
        ref_tokens, ref_logprobs = hf_generate_greedy(model, prompt, 8)
        assert out.outputs[0].token_ids == ref_tokens
        got = [chosen.logprob for chosen, _ in out.outputs[0].logprobs or []]
        assert got == pytest.approx(ref_logprobs, abs=1e-3)


def test_tokenizer_and_chat_template_match_transformers(engine: LLMEngine, hf: tuple[Any, Any]) -> None:
    _, hf_tok = hf
    texts = [
        "Hello world 12345, it's  fine\n\n  ok",
        "naïve café — 東京 🚀",
        "<|im_start|>user\nhi<|im_end|>",
    ]
    for text in texts:
        assert engine.tokenizer.encode(text) == hf_tok.encode(text, add_special_tokens=False)
        ids = engine.tokenizer.encode(text)
        assert engine.tokenizer.decode(ids, skip_special_tokens=False) == text
    for messages in MESSAGES:
        ours = engine.tokenizer.apply_chat_template(messages)
        theirs = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ours == theirs
    assert engine.tokenizer.eos_token_id == 2 and engine.tokenizer.bos_token_id == 1


def test_gguf_weights_are_unpermuted_like_transformers(engine: LLMEngine, hf: tuple[Any, Any]) -> None:
    model, _ = hf
    attn: Any = engine.runner.model.layers[0].self_attn
    q_size, kv_size = attn.q_size, attn.kv_size
    qkv = attn.qkv_proj.dense_weight()
    ref = model.model.layers[0].self_attn
    assert torch.equal(qkv[:q_size], ref.q_proj.weight)
    assert torch.equal(qkv[q_size : q_size + kv_size], ref.k_proj.weight)
