"""``TritonPagedAttention``: the attention backend of the GPU path, on Triton kernels.

It keeps ``TorchPagedAttention``'s cache layout and reads the same ``AttentionMetadata``, so the model
runner, the KV sizing and the quantized rows are the same on either backend; only the three steps of a
layer's attention change: the KV write (``kv_write``), the decodes (``paged_decode``, split-K over long
contexts) and the prefill chunks (``prefill``, one launch for fresh prompts, one for chunks with context).

The prefill launches' chunk tables are built once per step and view (every layer shares them), keyed by
the metadata object itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Protocol

import torch

from backends.engine.kernels import KV_SCALE_BYTES
from backends.engine.kernels.triton import is_available
from backends.engine.kernels.triton.kv_write import write_kv
from backends.engine.kernels.triton.paged_decode import paged_decode
from backends.engine.kernels.triton.prefill import ChunkView, PrefillBatch, prefill

__all__ = ["TritonPagedAttention", "is_available"]

_MAX_CACHED_VIEWS = 4
"""Steps' views whose prefill batches are kept: a step has one or two (Gemma 3's sliding view)."""


class StepView(Protocol):
    """What the backend reads of ``layers.attention.AttentionMetadata``: the kernels sit below the layers
    and do not import them, and the metadata fits this shape as it is."""

    @property
    def slot_mapping(self) -> torch.Tensor: ...
    @property
    def block_size(self) -> int: ...
    @property
    def num_decode_tokens(self) -> int: ...
    @property
    def decode_blocks(self) -> torch.Tensor | None: ...
    @property
    def decode_lens(self) -> torch.Tensor | None: ...
    @property
    def sliding_window(self) -> int | None: ...
    @property
    def prefills(self) -> Sequence[ChunkView]: ...


class TritonPagedAttention:
    """Paged attention on Triton kernels (CUDA, or Triton's interpreter on CPU tensors).

    q: [T, num_heads, head_dim]; k, v: [T, num_kv_heads, head_dim]; caches: [num_kv_heads, num_slots,
    width] as ``TorchPagedAttention`` lays them out, int8/fp8 rows included.
    """

    def __init__(
        self, *, partition_size: int = 512, decode_block_n: int = 32, block_m: int = 64, block_n: int = 64
    ) -> None:
        self.partition_size = partition_size
        """Split-K's cut of a decode's context, in tokens (a multiple of ``decode_block_n``)."""
        self.decode_block_n = decode_block_n
        """Keys per decode tile."""
        self.block_m = block_m
        """Queries per prefill program."""
        self.block_n = block_n
        """Keys per prefill tile."""
        self._batches: dict[int, tuple[weakref.ref[StepView], list[PrefillBatch]]] = {}

    def cache_shape(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, kv_cache_dtype: str = "auto"
    ) -> tuple[int, ...]:
        """``TorchPagedAttention``'s: a row is head_dim values, or head_dim codes and a 4-byte scale."""
        width = head_dim if kv_cache_dtype == "auto" else head_dim + KV_SCALE_BYTES
        return (num_kv_heads, num_blocks * block_size, width)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: StepView,
        scale: float,
    ) -> torch.Tensor:
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        d = meta.num_decode_tokens
        if d:  # decodes: rows [0, d), K/V in place through the block table
            assert meta.decode_blocks is not None and meta.decode_lens is not None
            paged_decode(
                q[:d],
                k_cache,
                v_cache,
                meta.decode_blocks,
                meta.decode_lens,
                meta.block_size,
                scale,
                out[:d],
                meta.sliding_window,
                partition_size=self.partition_size,
                block_n=self.decode_block_n,
            )
        for batch in self._prefill_batches(meta, q.device):
            prefill(
                q,
                k,
                v,
                k_cache,
                v_cache,
                batch,
                scale,
                out,
                meta.sliding_window,
                block_m=self.block_m,
                block_n=self.block_n,
            )
        return out

    def _prefill_batches(self, meta: StepView, device: torch.device) -> list[PrefillBatch]:
        """``meta``'s prefill chunks as launches, built by its first layer and reused by the others."""
        if not meta.prefills:
            return []
        cached = self._batches.get(id(meta))
        if cached is not None and cached[0]() is meta:
            return cached[1]
        batches = PrefillBatch.split(meta.prefills, device)
        if len(self._batches) >= _MAX_CACHED_VIEWS:  # older steps' views
            self._batches = {key: entry for key, entry in self._batches.items() if entry[0]() is not None}
            while len(self._batches) >= _MAX_CACHED_VIEWS:
                del self._batches[next(iter(self._batches))]
        self._batches[id(meta)] = (weakref.ref(meta), batches)
        return batches
