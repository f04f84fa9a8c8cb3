"""The real Gemma 3 270M GGUF against transformers loading the same file in fp32 (slow: transformers'
GGUF reader needs ~30 s; everything is loaded once per module)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from backends.engine.chat_template import GEMMA3_CHAT_TEMPLATE
from backends.engine.config import EngineConfig
from backends.engine.llm_engine import LLMEngine
from backends.engine.loader import GEMMA3_NAME, gemma3_gguf_path
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.tiny import hf_generate_greedy

pytestmark = pytest.mark.slow

MAX_TOKENS = 8
# ~600 tokens: past the 512-token window, so the sliding layers really drop keys the full layers keep
LONG_TEXT = "".join(
    f"Entry {i}: the {colour} fox jumped over {i * 7 % 13} lazy dogs near the river bank.\n"
    for i, colour in zip(range(30), ["red", "brown", "grey", "white", "black"] * 6, strict=True)
)
MESSAGES = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": " Another one? "},
    ],
]
TEXTS = [
    "Hello world 12345, it's  fine\n\n  ok",
    "naïve café — 東京 🚀 Ünïcödé ﬁ",
    "def f(x):\n    return x  *  2\t# tabs\tand    spaces\n\n\n",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "   leading spaces, trailing   ",
    "<bos>literal specials<eos> and <table><tr><td>html</td></tr></table>",
    "\u200b zero width, \x00 nul, emoji 👩‍👩‍👧 family",
]


@pytest.fixture(scope="module")
def engine() -> Iterator[LLMEngine]:
    num_threads = torch.get_num_threads()
    config = EngineConfig(
        model=GEMMA3_NAME,
        device="cpu",
        kv_cache_bytes=128 << 20,
        max_num_batched_tokens=256,  # the long prompts arrive in chunks
        enable_prefix_caching=True,
        # one thread (for transformers too: the engine sets it process-wide) keeps the run's time steady
        # on a busy machine, where two threads contending for two cores ran small matmuls ~30x slower
        num_threads=1,
    )
    engine = LLMEngine(config)
    yield engine
    engine.check_invariants()
    torch.set_num_threads(num_threads)


@pytest.fixture(scope="module")
def hf_model() -> Any:
    from transformers import AutoModelForCausalLM

    path = gemma3_gguf_path()
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    from transformers import AutoTokenizer

    path = gemma3_gguf_path()
    # the class AutoTokenizer picks for this file, named so that the config is not read a second time
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, tokenizer_type="gemma")


def test_config_reads_the_file(engine: LLMEngine) -> None:
    cfg = engine.model_config
    assert (cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == (18, 640, 2048)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (4, 1, 256, 262144)
    assert (cfg.sliding_window, cfg.rope_theta, cfg.rope_local_theta) == (512, 1e6, 1e4)
    assert [i for i in range(cfg.num_layers) if not cfg.is_sliding(i)] == [5, 11, 17]
    assert cfg.tie_word_embeddings and cfg.final_logit_softcapping is None
    assert engine.model_name == GEMMA3_NAME and engine.runner.is_mixed


def test_greedy_matches_transformers(engine: LLMEngine, hf_model: Any) -> None:
    tok = engine.tokenizer
    long_prompt = tok.encode(LONG_TEXT, add_special_tokens=True)
    assert len(long_prompt) > 512 + 64
    prompts = [
        tok.encode("The capital of France is", add_special_tokens=True),
        tok.encode(tok.apply_chat_template(MESSAGES[0])),
        long_prompt,
    ]
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0)
    outputs = engine.generate(prompts, params)
    # the long prompt again with a new tail: its leading blocks come from the prefix cache
    prompts.append(long_prompt + tok.encode("Entry 30: the"))
    outputs += engine.generate(prompts[-1:], params)
    assert outputs[-1].num_cached_tokens >= len(long_prompt) // 16 * 16 - 16
    for prompt, out in zip(prompts, outputs, strict=True):
        ref_tokens, ref_logprobs = hf_generate_greedy(hf_model, prompt, MAX_TOKENS)
        assert out.outputs[0].token_ids == ref_tokens
        got = [chosen.logprob for chosen, _ in out.outputs[0].logprobs or []]
        assert got == pytest.approx(ref_logprobs, abs=1e-3)


def test_weights_match_transformers(engine: LLMEngine, hf_model: Any) -> None:
    """No q/k row permutation for gemma3 (unlike llama), and norms stored plus one are taken back."""
    ours: Any = engine.runner.model
    ref = hf_model.model
    assert torch.equal(ours.embed_tokens.weight, ref.embed_tokens.weight)
    for i in (0, 5):
        attn, ref_attn = ours.layers[i].self_attn, ref.layers[i].self_attn
        qkv = attn.qkv_proj.dense_weight()
        q_size, kv_size = attn.q_size, attn.kv_size
        assert torch.equal(qkv[:q_size], ref_attn.q_proj.weight)
        assert torch.equal(qkv[q_size : q_size + kv_size], ref_attn.k_proj.weight)
        assert torch.equal(attn.q_norm.weight, ref_attn.q_norm.weight)
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm"):
            assert torch.equal(getattr(ours.layers[i], norm).weight, getattr(ref.layers[i], norm).weight)
    assert torch.equal(ours.norm.weight, ref.norm.weight)


def test_tokenizer_matches_transformers(engine: LLMEngine, hf_tokenizer: Any) -> None:
    tok = engine.tokenizer
    for text in [*TEXTS, LONG_TEXT]:
        ids = tok.encode(text)
        assert ids == hf_tokenizer.encode(text, add_special_tokens=False), text
        assert tok.encode(text, add_special_tokens=True) == [2, *ids]  # BOS prepended by the engine
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == hf_tokenizer.decode(
                ids, skip_special_tokens=skip
            )
        assert tok.decode(ids, skip_special_tokens=False) == text
    assert (tok.bos_token_id, tok.eos_token_id, tok.chat_stop_token_ids) == (2, 1, (106,))
    assert tok.encode("<start_of_turn><end_of_turn>") == [105, 106]


def test_chat_template_matches_gemmas(engine: LLMEngine, hf_tokenizer: Any) -> None:
    tok = engine.tokenizer
    assert tok.chat_template == GEMMA3_CHAT_TEMPLATE  # the file carries none
    rendered = tok.apply_chat_template(MESSAGES[1])
    assert rendered == (
        "<bos><start_of_turn>user\nBe brief.\n\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\nBlue.<end_of_turn>\n"
        "<start_of_turn>user\nAnother one?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    for messages in MESSAGES:
        for add_generation_prompt in (True, False):
            theirs = hf_tokenizer.apply_chat_template(
                messages,
                chat_template=GEMMA3_CHAT_TEMPLATE,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )
            assert tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == theirs
    ids = tok.encode(rendered)
    assert ids[:3] == [2, 105, tok.encode("user")[0]] and ids.count(2) == 1
