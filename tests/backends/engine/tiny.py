"""Tiny random-weight Hugging Face models (Llama, Mistral, Qwen2, Gemma 3) saved on the fly, with a
byte-level tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tokenizers
import torch
from tokenizers import decoders, models, pre_tokenizers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SLIDING, FULL = "sliding_attention", "full_attention"

VARIANTS: dict[str, dict[str, Any]] = {
    "gqa": {"num_attention_heads": 4, "num_key_value_heads": 2},
    "mqa": {"num_attention_heads": 4, "num_key_value_heads": 1},
    "tied": {"num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": True},
    "llama3_rope": {
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    },
    "linear_rope": {
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    "qwen2": {"num_attention_heads": 4, "num_key_value_heads": 2, "arch": "qwen2"},
    # every layer slides; 8 cuts inside a 16-token block, 20 across a block edge
    "mistral_window8": {
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "arch": "mistral",
        "sliding_window": 8,
    },
    "mistral_window20": {
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "arch": "mistral",
        "sliding_window": 20,
    },
    # Qwen2 slides only from max_window_layers on: layer 0 full, layer 1 sliding
    "qwen2_mixed_window8": {
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "arch": "qwen2",
        "sliding_window": 8,
        "use_sliding_window": True,
        "max_window_layers": 1,
    },
    # Gemma 3: sliding layers interleaved with full ones, each kind with its own RoPE base; a query scale
    # other than head_dim's, and (window20) final logit softcapping that bites on these logits
    "gemma3_window8": {
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "arch": "gemma3",
        "num_hidden_layers": 6,
        "sliding_window": 8,
        "layer_types": [SLIDING, SLIDING, FULL, SLIDING, SLIDING, FULL],
        "query_pre_attn_scalar": 24,
    },
    "gemma3_window20": {
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "arch": "gemma3",
        "num_hidden_layers": 4,
        "sliding_window": 20,
        "layer_types": [SLIDING, FULL, SLIDING, SLIDING],
        "final_logit_softcapping": 2.0,
    },
}
GEMMA3_VARIANTS = [name for name, opts in VARIANTS.items() if opts.get("arch") == "gemma3"]


def byte_tokenizer() -> tokenizers.Tokenizer:
    """GPT-2 style byte-level BPE with no merges: one token per byte, plus ChatML specials."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = tokenizers.Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


VOCAB_SIZE = 256 + len(SPECIALS)
EOS_ID = 256


def build_tiny_model(path: Path, variant: str = "gqa", *, seed: int = 0) -> Path:
    """Save a random tiny model in HF format (config, safetensors, tokenizer files) under ``path``."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    opts = dict(VARIANTS[variant])
    arch = opts.pop("arch", "llama")
    common: dict[str, Any] = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "initializer_range": 0.1,
        "bos_token_id": None,
        "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID,
        **opts,
    }
    torch.manual_seed(seed)
    if arch == "qwen2":
        model: Any = Qwen2ForCausalLM(Qwen2Config(**{"use_sliding_window": False, **common}))
        with torch.no_grad():  # random biases, so the bias path is really tested
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.1)
    elif arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**common))
    elif arch == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common, head_dim=16))
        with torch.no_grad():  # Gemma norms start at zero (a scale of 1): random, so (1 + w) is tested
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.normal_(0, 0.2)
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    byte_tokenizer().save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": SPECIALS[0], "chat_template": CHATML, "add_bos_token": False})
    )
    return path


def load_hf(path: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()


@torch.inference_mode()
def hf_greedy(model: Any, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and their logprobs by plain full recomputation (no HF cache subtleties)."""
    ids = list(prompt)
    out, lps = [], []
    for _ in range(max_tokens):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        lp = torch.log_softmax(logits, -1)
        tok = int(logits.argmax())
        out.append(tok)
        lps.append(float(lp[tok]))
        ids.append(tok)
    return out, lps


@torch.inference_mode()
def hf_generate_greedy(model: Any, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy tokens and logprobs with HF's own KV cache (faster for real models; EOS not suppressed).
    Only the last prompt position's logits are computed (a long prompt times a 262k vocabulary would
    not fit otherwise)."""
    out = model(torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
    tokens, logprobs = [], []
    for _ in range(max_tokens):
        lp = torch.log_softmax(out.logits[0, -1].float(), -1)
        tok = int(lp.argmax())
        tokens.append(tok)
        logprobs.append(float(lp[tok]))
        out = model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
    return tokens, logprobs
