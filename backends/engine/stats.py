"""``EngineStats``: the engine's counters at one moment (torch-free, so the server can import it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for /metrics and admission control."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_blocks_total: int
    num_blocks_free: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    num_generated_tokens: int
    num_prompt_tokens: int
    spec_num_drafts: int = 0
    """Speculative decoding: sequence-steps that verified proposals."""
    spec_num_draft_tokens: int = 0
    """Proposed tokens verified."""
    spec_num_accepted_tokens: int = 0
    """Proposed tokens the target kept."""
    spec_accepted_per_pos: tuple[int, ...] = ()
    """Kept tokens by position in the proposal (first, second, ...)."""
    is_cuda: bool = False
    """The engine runs on a CUDA device (the metrics then add the GPU names)."""
    gpu_memory_allocated_bytes: int = 0
    """On CUDA: bytes held by tensors on the engine's device (torch's caching allocator)."""
    gpu_memory_reserved_bytes: int = 0
    """On CUDA: bytes the caching allocator holds on that device, in tensors or cached."""
