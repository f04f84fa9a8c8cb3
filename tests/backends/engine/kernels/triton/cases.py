"""Random steps of paged attention for the Triton kernels and their torch reference.

A step holds sequences given as (num_context, num_new): a decode when one new token follows some
context, else a prefill chunk (fresh without context; a later chunk or a prefix hit with it). Each
sequence owns scattered blocks; its context K/V are written to the cache beforehand by the reference
writer, and every slot nothing wrote holds 0xFF bytes (NaN in every float dtype, and in an int8 row's
scale), so a kernel that reads past a length or outside a window shows it. The metadata is built as
``ModelRunner._view`` builds it: decodes first, windowed tables cut to the window's first block,
context slots from the window's first key, the runner's own masks.

The tensors live on ``DEVICE``: the CPU under Triton's interpreter (the conftest's default), the GPU
when Triton compiles (``TRITON_INTERPRET=0`` on a machine with one, as ``bench/gpu`` runs these tests).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import pytest
import torch

from backends.engine.kernels.triton import is_available
from backends.engine.layers import kv_quant
from backends.engine.layers.attention import AttentionMetadata, PrefillChunk, TorchPagedAttention
from backends.engine.model_runner import _causal_mask, _first_key

DEVICE = torch.device("cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda")
needs_triton = pytest.mark.skipif(
    not is_available(), reason="TRITON_INTERPRET=0 and no GPU: nothing to run the Triton kernels on"
)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-2}
"""Max abs and relative difference from the torch reference, per q dtype."""


@dataclass
class Step:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    meta: AttentionMetadata
    scale: float

    def caches(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh copies of the caches, one pair per backend under test."""
        return self.k_cache.clone(), self.v_cache.clone()


def build_step(
    seqs: list[tuple[int, int]],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    *,
    dtype: torch.dtype = torch.float32,
    block_size: int = 16,
    kv_cache_dtype: str = "auto",
    window: int | None = None,
    seed: int = 0,
) -> Step:
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    seqs = sorted(seqs, key=lambda s: not (s[1] == 1 and s[0] > 0))  # decodes first, as the runner does
    tables = [-(-(c + n) // block_size) for c, n in seqs]
    num_blocks = sum(tables) + 3
    ids = rng.sample(range(num_blocks), sum(tables))
    width = kv_quant.row_width(head_dim, kv_cache_dtype)
    storage = kv_quant.storage_dtype(kv_cache_dtype, dtype)
    shape = (num_kv_heads, num_blocks * block_size, width * storage.itemsize)  # in bytes
    k_cache = torch.full(shape, 0xFF, dtype=torch.uint8).view(storage)
    v_cache = torch.full(shape, 0xFF, dtype=torch.uint8).view(storage)

    def rows(n: int, spread: float = 1.0) -> torch.Tensor:
        return (torch.randn(n, num_kv_heads, head_dim, generator=gen) * spread).to(dtype)

    slot_mapping: list[int] = []
    decodes: list[tuple[list[int], int]] = []
    prefills: list[PrefillChunk] = []
    for c, n in seqs:
        table, ids = ids[: -(-(c + n) // block_size)], ids[-(-(c + n) // block_size) :]
        slots = [table[p // block_size] * block_size + p % block_size for p in range(c + n)]
        if c:  # the context is in the cache already
            _write(k_cache, v_cache, torch.tensor(slots[:c]), rows(c, 3.0), rows(c))
        start = len(slot_mapping)
        slot_mapping.extend(slots[c:])
        if n == 1 and c > 0:
            decodes.append((table, c + 1))
            continue
        chunk = PrefillChunk(start, start + n, c, None)
        if c:
            first_key = _first_key(c, window)
            chunk.context_slots = torch.tensor(slots[first_key:])
            chunk.mask = _causal_mask(c, c + n, first_key, window, torch.device("cpu"))
        elif window is not None and n > window:
            chunk.mask = _causal_mask(0, n, 0, window, torch.device("cpu"))
        prefills.append(chunk)

    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slot_mapping),
        block_size=block_size,
        sliding_window=window,
        prefills=prefills,
    )
    if decodes:
        cut = []
        for table, num_tokens in decodes:  # a window drops the blocks out of reach
            first = _first_key(num_tokens - 1, window) // block_size
            cut.append((table[first:], num_tokens - first * block_size))
        max_blocks = -(-max(n for _, n in cut) // block_size)
        meta.num_decode_tokens = len(cut)
        meta.decode_blocks = torch.tensor([t + [t[0]] * (max_blocks - len(t)) for t, _ in cut])
        meta.decode_lens = torch.tensor([n for _, n in cut], dtype=torch.int32)
    num_tokens = len(slot_mapping)
    q = torch.randn(num_tokens, num_heads, head_dim, generator=gen).to(dtype)
    step = Step(q, rows(num_tokens, 3.0), rows(num_tokens), k_cache, v_cache, meta, head_dim**-0.5)
    return _to(step, DEVICE)


def _to(step: Step, device: torch.device) -> Step:
    """``step`` with every tensor, the metadata's included, on ``device``."""
    meta = step.meta
    meta.slot_mapping = meta.slot_mapping.to(device)
    if meta.decode_blocks is not None and meta.decode_lens is not None:
        meta.decode_blocks, meta.decode_lens = meta.decode_blocks.to(device), meta.decode_lens.to(device)
    for chunk in meta.prefills:
        if chunk.context_slots is not None:
            chunk.context_slots = chunk.context_slots.to(device)
        if chunk.mask is not None:
            chunk.mask = chunk.mask.to(device)
    q, k, v = step.q.to(device), step.k.to(device), step.v.to(device)
    return Step(q, k, v, step.k_cache.to(device), step.v_cache.to(device), meta, step.scale)


def _write(
    k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    if kv_quant.is_quantized(k_cache):
        kv_quant.write(k_cache, slots, k)
        kv_quant.write(v_cache, slots, v)
    else:
        k_cache.index_copy_(1, slots, k.transpose(0, 1))
        v_cache.index_copy_(1, slots, v.transpose(0, 1))


def reference(step: Step) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The torch path's output and the caches it leaves (the decodes on its gather path, no C kernel)."""
    k_cache, v_cache = step.caches()
    out = TorchPagedAttention().forward(step.q, step.k, step.v, k_cache, v_cache, step.meta, step.scale)
    return out, k_cache, v_cache


def max_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.float() - expected.float()).abs().max())


def assert_matches(got: torch.Tensor, expected: torch.Tensor) -> None:
    tol = TOLERANCE[expected.dtype]
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)
