"""KV-cache sizing: the budget (explicit or a share of free memory), its split into pools (one, or the two
KV groups of a model that mixes full and sliding layers), and the window one pool may free."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backends.engine import kv_sizing
from backends.engine.config import EngineConfig
from backends.engine.kv_sizing import available_host_bytes, freeable_window, plan_kv_cache, plan_kv_pools
from backends.engine.model_config import FULL, SLIDING, ModelConfig

CPU = torch.device("cpu")
SHAPES: dict[str, Any] = {
    "vocab_size": 16,
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_layers": 6,
    "num_heads": 1,
    "num_kv_heads": 1,
    "head_dim": 8,
    "sliding_window": 64,
}
MIXED = ModelConfig(**SHAPES, layer_types=tuple(FULL if i == 5 else SLIDING for i in range(6)))
EVERY = ModelConfig(**SHAPES, layer_types=(SLIDING,) * 6)


def test_full_attention_layers_keep_every_block() -> None:
    shapes: dict[str, Any] = {
        "vocab_size": 16,
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_layers": 3,
        "num_heads": 1,
        "num_kv_heads": 1,
        "head_dim": 8,
        "sliding_window": 512,
    }
    every = ModelConfig(**shapes, architecture="MistralForCausalLM")
    named = ModelConfig(**shapes, layer_types=("sliding_attention",) * 3)
    mixed = ModelConfig(**shapes, layer_types=("sliding_attention", "sliding_attention", "full_attention"))
    assert freeable_window(every, 4096) == freeable_window(named, 4096) == 512
    assert freeable_window(mixed, 4096) is None
    assert freeable_window(every, 512) is None  # a window that never bites frees nothing


def test_a_mixed_model_gets_two_groups_unless_freeing_is_off() -> None:
    config = EngineConfig(model="x", kv_cache_bytes=4 << 20, max_num_seqs=4)
    plan = plan_kv_cache(MIXED, config, CPU, torch.float32, 1024)
    assert plan.window == 64 and plan.single_pool_window is None
    assert plan.sizes == plan_kv_pools(MIXED, config, 4 << 20, 4, 64, 1024)
    assert plan.sizes.num_sliding_blocks is not None
    keep = EngineConfig(model="x", kv_cache_bytes=4 << 20, max_num_seqs=4, free_window_blocks=False)
    kept = plan_kv_cache(MIXED, keep, CPU, torch.float32, 1024)
    assert kept.window == 64 and kept.sizes.num_sliding_blocks is None and kept.single_pool_window is None


def test_a_model_whose_every_layer_slides_frees_from_one_pool() -> None:
    config = EngineConfig(model="x", kv_cache_bytes=4 << 20)
    plan = plan_kv_cache(EVERY, config, CPU, torch.bfloat16, 1024)
    assert plan.sizes.num_sliding_blocks is None and plan.window == plan.single_pool_window == 64
    assert plan.sizes == plan_kv_pools(EVERY, config, 4 << 20, 2, 64, 1024)


def test_without_a_budget_a_share_of_free_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kv_sizing, "available_host_bytes", lambda: 10 << 20)
    config = EngineConfig(model="x", kv_cache_fraction=0.5)
    plan = plan_kv_cache(EVERY, config, CPU, torch.float32, 1024)
    assert plan.sizes == plan_kv_pools(EVERY, config, 5 << 20, 4, 64, 1024)


def test_available_host_bytes_reads_the_machine() -> None:
    assert available_host_bytes() > 0


def test_the_budget_split_between_two_groups() -> None:
    """Both pools start from the one-pool count; the sliding one is capped at max_num_seqs windows (and
    a block each) plus one step's chunk, and the rest of its bytes go to the full layers."""
    gemma = ModelConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_layers=18,
        num_heads=4,
        num_kv_heads=1,
        head_dim=256,
        sliding_window=512,
        layer_types=tuple(FULL if (i + 1) % 6 == 0 else SLIDING for i in range(18)),
    )
    layer_block = 2 * 256 * 2 * 16  # K and V, bf16, 16 tokens
    config = EngineConfig(model="x", max_num_seqs=4, max_num_batched_tokens=512)
    budget = 1000 * 18 * layer_block  # a one-pool budget of 1,000 blocks
    sizes = plan_kv_pools(gemma, config, budget, 2, 512, 32768)
    assert sizes.num_sliding_blocks == 4 * (33 + 1) + 32  # four windows of 33 blocks (and one) and a chunk
    assert sizes.num_blocks == (1000 * 18 - 168 * 15) // 3  # 5,160: the full pool gains the rest
    small = plan_kv_pools(gemma, config, 100 * 18 * layer_block, 2, 512, 32768)
    assert small.num_blocks == small.num_sliding_blocks == 100  # under the cap: as many as one pool
    assert plan_kv_pools(gemma, config, budget, 2, None, 32768).num_sliding_blocks is None  # freeing off
