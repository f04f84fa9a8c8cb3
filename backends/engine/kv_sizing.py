"""How big the KV cache is: the byte budget (explicit, or a share of free device memory), split into
one pool or two KV groups by ``plan_kv_pools``, and the window whose passed blocks may be freed.

The plan is derived once at start-up and handed to the block manager and the model runner; it never
writes back into ``EngineConfig``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from backends.engine.config import EngineConfig
from backends.engine.kv_groups import KVPoolSizes, plan_kv_pools
from backends.engine.layers import kv_quant
from backends.engine.model_config import ModelConfig


@dataclass(frozen=True)
class KVCachePlan:
    """The pools' sizes and the windows the block manager and the model runner are built with."""

    sizes: KVPoolSizes
    window: int | None
    """The sliding layers' window (None: full attention everywhere)."""
    single_pool_window: int | None
    """The window whose passed blocks one pool frees (every layer slides and freeing is on), else None."""


def plan_kv_cache(
    cfg: ModelConfig, config: EngineConfig, device: torch.device, dtype: torch.dtype, max_model_len: int
) -> KVCachePlan:
    """The KV cache of ``cfg`` served at ``max_model_len`` on ``device`` in ``dtype``."""
    window = cfg.attention_window(max_model_len)
    freeing = window if config.free_window_blocks else None
    sizes = kv_pool_sizes(cfg, config, device, dtype, freeing, max_model_len)
    single_pool_window = freeable_window(cfg, max_model_len) if config.free_window_blocks else None
    return KVCachePlan(sizes, window, single_pool_window)


def kv_pool_sizes(
    cfg: ModelConfig,
    config: EngineConfig,
    device: torch.device,
    dtype: torch.dtype,
    window: int | None,
    max_model_len: int,
) -> KVPoolSizes:
    """Blocks of one pool, or of the full and sliding layers' pools (``plan_kv_pools`` splits)."""
    budget = config.kv_cache_bytes
    if budget is None:
        if device.type == "cuda":
            free_bytes = torch.cuda.mem_get_info(device)[0]
        else:
            free_bytes = available_host_bytes()
        budget = int(free_bytes * config.kv_cache_fraction)
    dtype_bytes = torch.finfo(dtype).bits // 8
    return plan_kv_pools(cfg, config, budget, dtype_bytes, window, max_model_len)


def kv_bytes_per_token(cfg: ModelConfig, dtype: torch.dtype, kv_cache_dtype: str = "auto") -> int:
    """Bytes of K plus V for one token across all layers, the scales of a quantized cache included."""
    row = kv_quant.row_bytes(cfg.head_dim, torch.finfo(dtype).bits // 8, kv_cache_dtype)
    return 2 * cfg.num_layers * cfg.num_kv_heads * row


def freeable_window(cfg: ModelConfig, max_model_len: int) -> int | None:
    """The window whose passed blocks a single pool may free: only when every layer slides (a model with
    full layers too gets two groups instead, and its sliding group frees)."""
    window = cfg.attention_window(max_model_len)
    if window is None or cfg.layer_types is None:
        return window
    return window if all(t == "sliding_attention" for t in cfg.layer_types) else None


def available_host_bytes() -> int:
    """MemAvailable from /proc/meminfo (free plus reclaimable cache); free pages where it is absent."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
