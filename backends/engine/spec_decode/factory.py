"""``build_proposer``: the engine's proposer from its config (None when it does not speculate)."""

from __future__ import annotations

import torch

from backends.engine.config import EngineConfig
from backends.engine.kv_groups import build_kv_blocks
from backends.engine.kv_sizing import plan_kv_cache
from backends.engine.loader import load_model
from backends.engine.model_runner import ModelRunner
from backends.engine.models import instantiate
from backends.engine.scheduler import Proposer
from backends.engine.spec_decode.draft import DraftProposer
from backends.engine.spec_decode.ngram import NgramProposer


def build_proposer(
    config: EngineConfig, device: torch.device, dtype: torch.dtype, vocab_size: int, max_model_len: int
) -> Proposer | None:
    """The n-gram or draft-model proposer ``config`` asks for; the draft model is loaded here, must
    share the target's vocabulary, and gets its own KV pool sized like the target's."""
    method, k = config.speculative_method, config.num_speculative_tokens
    if method is None:
        return None
    if method == "ngram":
        return NgramProposer(k, min_n=config.ngram_prompt_lookup_min, max_n=config.ngram_prompt_lookup_max)
    assert config.speculative_model is not None
    loaded = load_model(config.speculative_model)
    cfg = loaded.model_config
    if cfg.vocab_size != vocab_size:
        raise ValueError(
            f"the draft model {config.speculative_model!r} has {cfg.vocab_size} tokens in its vocabulary; "
            f"the target has {vocab_size}: a draft must share the target's tokenizer"
        )
    cfg.check_servable(max_model_len)
    model = instantiate(
        loaded,
        dtype=dtype,
        device=device,
        max_position=max(max_model_len, cfg.max_position_embeddings),
        batch_hint=config.max_num_seqs,
    )
    plan = plan_kv_cache(cfg, config, device, dtype, max_model_len)
    blocks = build_kv_blocks(
        plan.sizes,
        config.block_size,
        enable_prefix_caching=False,
        window=plan.window or 0,
        single_pool_window=plan.single_pool_window,
    )
    runner = ModelRunner(
        model,
        num_blocks=plan.sizes.num_blocks,
        num_sliding_blocks=plan.sizes.num_sliding_blocks,
        block_size=config.block_size,
        sliding_window=plan.window,
        quantization=config.speculative_quantization,
    )
    return DraftProposer(runner, blocks, k, seed=config.seed)
