"""How big the KV cache is: the bytes a token takes, the byte budget (explicit, a share of free host
memory, or on CUDA what ``--gpu-memory-utilization`` leaves, ``device_memory.py``), its split into one
pool or two KV groups (``plan_kv_pools``), and the window whose passed blocks may be freed.

The plan is derived once at start-up and handed to the block manager and the model runner; it never
writes back into ``EngineConfig``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace

import torch

from backends.engine.config import EngineConfig
from backends.engine.device_memory import (
    MemoryReader,
    estimate_activation_bytes,
    gpu_kv_budget,
    read_cuda_memory,
)
from backends.engine.layers import kv_quant
from backends.engine.model_config import ModelConfig
from backends.engine.parallel.group import ParallelLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVPoolSizes:
    """Blocks in each pool: ``num_sliding_blocks`` is None for one pool (every layer in every block)."""

    num_blocks: int
    """The single pool's blocks, or the full layers' pool's with two groups."""
    num_sliding_blocks: int | None = None


@dataclass(frozen=True)
class KVCachePlan:
    """The pools' sizes and the windows the block manager and the model runner are built with."""

    sizes: KVPoolSizes
    window: int | None
    """The sliding layers' window (None: full attention everywhere)."""
    single_pool_window: int | None
    """The window whose passed blocks one pool frees (every layer slides and freeing is on), else None."""


def plan_kv_cache(
    cfg: ModelConfig,
    config: EngineConfig,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int,
    *,
    baseline_allocated_bytes: int = 0,
    read_memory: MemoryReader = read_cuda_memory,
) -> KVCachePlan:
    """The KV cache of ``cfg`` served at ``max_model_len`` on ``device`` in ``dtype``; on CUDA the
    engine's own bytes are what the device's allocations grew by since ``baseline_allocated_bytes``."""
    window = cfg.attention_window(max_model_len)
    freeing = window if config.free_window_blocks else None
    sizes = kv_pool_sizes(
        cfg,
        config,
        device,
        dtype,
        freeing,
        max_model_len,
        baseline_allocated_bytes=baseline_allocated_bytes,
        read_memory=read_memory,
    )
    single_pool_window = freeable_window(cfg, max_model_len) if config.free_window_blocks else None
    return KVCachePlan(sizes, window, single_pool_window)


def kv_pool_sizes(
    cfg: ModelConfig,
    config: EngineConfig,
    device: torch.device,
    dtype: torch.dtype,
    window: int | None,
    max_model_len: int,
    *,
    baseline_allocated_bytes: int = 0,
    read_memory: MemoryReader = read_cuda_memory,
) -> KVPoolSizes:
    """Blocks of one pool, or of the full and sliding layers' pools (``plan_kv_pools`` splits)."""
    budget = config.kv_cache_bytes
    dtype_bytes = torch.finfo(dtype).bits // 8
    if budget is None and device.type == "cuda":
        budget = cuda_kv_budget(
            cfg, config, device, dtype_bytes, max_model_len, baseline_allocated_bytes, read_memory
        )
    elif budget is None:  # the ranks of a parallel engine share the host's memory
        budget = int(available_host_bytes() * config.kv_cache_fraction) // config.world_size
    if config.world_size > 1:  # one rank's cache: its KV heads, its stage's layers
        cfg, budget = rank_share(cfg, config, budget)
    return plan_kv_pools(cfg, config, budget, dtype_bytes, window, max_model_len)


def rank_share(cfg: ModelConfig, config: EngineConfig, budget_bytes: int) -> tuple[ModelConfig, int]:
    """Plan one rank of a parallel engine as if it held every layer: ``cfg`` with the KV heads a tensor
    rank keeps (replicated ones count in full), and ``budget_bytes`` (one rank's) scaled up by
    layers / the most loaded stage's layers. Every rank has the same number of blocks (rank 0's
    scheduler hands out one block table for all), so that stage bounds them. Exact for one pool; with
    two KV groups the split follows the whole model's mix of sliding and full layers, which a stage's
    own mix may differ from by a layer or two."""
    layout = ParallelLayout(config.tensor_parallel_size, config.pipeline_parallel_size)
    rank_cfg = replace(cfg, num_kv_heads=layout.kv_heads_per_rank(cfg.num_kv_heads))
    return rank_cfg, budget_bytes * cfg.num_layers // layout.max_stage_layers(cfg.num_layers)


def plan_kv_pools(
    cfg: ModelConfig,
    config: EngineConfig,
    budget_bytes: int,
    dtype_bytes: int,
    window: int | None,
    max_model_len: int,
) -> KVPoolSizes:
    """Split ``budget_bytes`` between the pools; one pool unless ``window`` (the sliding layers', None
    when nothing may be freed) frees the sliding layers of a model that also has full ones. An element
    takes ``dtype_bytes`` (the model dtype's), or one byte plus a scale a row when ``config.kv_cache_dtype``
    quantizes.

    Two groups start from the one-pool count (both pools as many blocks as one pool would have: a split
    proportional to each group's bytes per token), then the sliding pool is capped at what it can ever
    use: ``max_num_seqs`` windows (and a block each) plus one step's prefill chunk. The bytes above that
    cap go to the full pool, which keeps every block of every sequence and so is what limits admission.
    No pool gets more blocks than every sequence at full length could use (they would only waste memory).
    """
    bs = config.block_size
    # K and V rows of every kv head, each with its scale when ``config.kv_cache_dtype`` quantizes
    row = kv_quant.row_bytes(cfg.head_dim, dtype_bytes, config.kv_cache_dtype)
    layer_block_bytes = 2 * cfg.num_kv_heads * row * bs
    max_blocks = config.max_num_seqs * -(-max_model_len // bs) * 2
    num_one_pool = min(budget_bytes // (cfg.num_layers * layer_block_bytes), max_blocks)
    num_sliding_layers = sum(cfg.is_sliding(i) for i in range(cfg.num_layers))
    if num_one_pool < 1:
        block_bytes = cfg.num_layers * layer_block_bytes
        raise ValueError(f"KV budget of {budget_bytes} bytes holds no block of {block_bytes} bytes")
    if window is None or num_sliding_layers == cfg.num_layers:
        return KVPoolSizes(num_one_pool)
    window_blocks = -(-(window - 1) // bs) + 1
    # a block more a sequence covers the rounding of its prefill chunk's own blocks
    sliding_cap = config.max_num_seqs * (window_blocks + 1) + -(-config.max_num_batched_tokens // bs)
    num_sliding = min(num_one_pool, sliding_cap)
    left = budget_bytes - num_sliding * num_sliding_layers * layer_block_bytes
    num_full_layers = cfg.num_layers - num_sliding_layers
    num_full = min(left // (num_full_layers * layer_block_bytes), max_blocks)
    return KVPoolSizes(num_full, num_sliding)


def cuda_kv_budget(
    cfg: ModelConfig,
    config: EngineConfig,
    device: torch.device,
    dtype_bytes: int,
    max_model_len: int,
    baseline_allocated_bytes: int,
    read_memory: MemoryReader,
) -> int:
    """What ``config.gpu_memory_utilization`` leaves the KV cache on ``device`` (``gpu_kv_budget``)."""
    memory = read_memory(device)
    engine_bytes = max(0, memory.allocated_bytes - baseline_allocated_bytes)
    activation_bytes = estimate_activation_bytes(
        cfg,
        num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        max_model_len=max_model_len,
        dtype_bytes=dtype_bytes,
    )
    budget = gpu_kv_budget(memory, config.gpu_memory_utilization, engine_bytes, activation_bytes)
    log.info(
        "GPU memory: %.2f of %.1f GiB; weights %.2f GiB, activations up to %.2f GiB, KV cache %.2f GiB",
        config.gpu_memory_utilization,
        memory.total_bytes / 2**30,
        engine_bytes / 2**30,
        activation_bytes / 2**30,
        budget / 2**30,
    )
    return budget


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
