"""How much of a GPU the KV cache may take: vLLM's ``--gpu-memory-utilization`` over a reading of the
device's memory, taken through an injectable reader so the arithmetic is tested without a GPU.

The engine may hold ``total * utilization`` bytes: its weights (what its allocations grew by since it
started), a step's peak activations (``estimate_activation_bytes``, an upper estimate of the torch
paths' temporaries) and the KV cache, which gets the rest. The cache never takes more than the device has
free either, less the activations, so another process on the same GPU shrinks it rather than making the
first big step run out of memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from backends.engine.model_config import ModelConfig


@dataclass(frozen=True)
class DeviceMemory:
    """One reading of a device's memory, in bytes."""

    free_bytes: int
    """Free on the device (the driver's count: every process's allocations are gone from it)."""
    total_bytes: int
    allocated_bytes: int
    """Held by this process's tensors (torch's caching allocator)."""
    reserved_bytes: int = 0
    """Held by this process's caching allocator, in tensors or cached for reuse."""


MemoryReader = Callable[[torch.device], DeviceMemory]
"""Reads a device's memory; ``read_cuda_memory`` on CUDA, a fake in tests."""


def read_cuda_memory(device: torch.device) -> DeviceMemory:
    """The CUDA device's free and total memory (``cudaMemGetInfo``) and torch's allocations on it."""
    free_bytes, total_bytes = torch.cuda.mem_get_info(device)
    return DeviceMemory(
        free_bytes, total_bytes, torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    )


def gpu_kv_budget(memory: DeviceMemory, utilization: float, engine_bytes: int, activation_bytes: int) -> int:
    """KV-cache bytes: ``total * utilization`` less what the engine holds (``engine_bytes``: its
    weights) and a step's activations, and never more than is free less those activations; 0 when
    nothing is left (the planner then refuses to start)."""
    allowed = int(memory.total_bytes * utilization) - engine_bytes - activation_bytes
    return max(0, min(allowed, memory.free_bytes - activation_bytes))


def estimate_activation_bytes(
    cfg: ModelConfig, *, num_batched_tokens: int, max_num_seqs: int, max_model_len: int, dtype_bytes: int
) -> int:
    """A step's peak activation bytes, an upper estimate for the torch paths (vLLM measures a dummy
    forward instead; this engine sizes its cache before the model runner exists).

    Live at once: one layer's tensors over ``num_batched_tokens`` tokens (the residual stream, its normed
    copy and the norm's fp32 temporaries, q|k|v and RoPE's copies, the attention output, gate|up and
    its product), the widest attention temporaries (a prefill chunk's fp32 scores and probabilities
    against ``max_model_len`` keys, as the masked math path makes them, or every decode's gathered keys
    and values at full length), and the logits of ``max_num_seqs`` rows with the sampler's fp32 copies.
    """
    t, hidden, inner = num_batched_tokens, cfg.hidden_size, cfg.intermediate_size
    q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    layer = t * (dtype_bytes * (3 * hidden + 2 * (q_size + 2 * kv_size) + q_size + 3 * inner) + 8 * hidden)
    prefill_scores = min(t, max_model_len) * cfg.num_heads * max_model_len * (4 + 4) + t * max_model_len
    decode_gather = max_num_seqs * max_model_len * (2 * kv_size * dtype_bytes + cfg.num_heads * (4 + 4))
    logits = max_num_seqs * cfg.vocab_size * (dtype_bytes + 3 * 4)
    return layer + max(prefill_scores, decode_gather) + logits
