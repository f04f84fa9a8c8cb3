"""Prefill attention over variable-length chunks: fresh prompts, later chunks and prefix hits.

The flat batch holds each chunk's query rows ``[start, end)``. A chunk's queries sit at positions
``num_context + i``; its keys at ``first_key + j``, ``first_key`` being the window's first key (0 without a
window). A query sees the keys at or before its own position, and with a window only the last ``window``
of them (``q - k < window``, as the model runner's masks say), so the kernel builds each tile's mask from
positions and needs no mask tensor.

Where the keys come from splits the chunks into two launches (``PrefillBatch``): a fresh prompt reads its
own k/v rows of the step, unquantized (as the torch path does); a chunk with context (a later chunk of a
long prompt, or the rest of a prompt after a prefix-cache hit) reads every key, its own included (they
were written to the cache just before), through ``PrefillChunk.context_slots``, dequantizing int8/fp8 rows.

A program takes ``block_m`` queries of one chunk and one query head, and reads the rows of that head's
kv head (``head // group``: GQA and MQA). It walks only the key tiles its queries can see: up to its last
query (causal) and from its first query's window start. Softmax is online in fp32; a row whose keys
are all masked in a tile keeps a zero weight there (the running max is taken as 0 while it is -inf, so
no -inf - -inf).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import triton
import triton.language as tl

from backends.engine.kernels.triton.tiles import (
    NO_WINDOW,
    DotConfig,
    block_dim,
    is_quantized,
    load_kv_tile,
    scale_view,
)


class ChunkView(Protocol):
    """What a prefill reads of ``layers.attention.PrefillChunk`` (the kernels do not import the layers)."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def num_context_tokens(self) -> int: ...
    @property
    def context_slots(self) -> torch.Tensor | None: ...


@dataclass(frozen=True)
class PrefillBatch:
    """Chunks whose keys come from the same place, described for one launch."""

    chunks: torch.Tensor
    """int32 [num_chunks, 5] on the device: q_start, q_len, num_context, key_start (the first key's row
    of k/v, or its index in ``slots``), first_key (its position)."""
    slots: torch.Tensor | None
    """int64: every chunk's key slots, one after another; None: the keys are the step's own k/v rows."""
    num_chunks: int
    max_q_len: int

    @staticmethod
    def split(prefills: Sequence[ChunkView], device: torch.device) -> list[PrefillBatch]:
        """The fresh chunks and the chunks with context, as (at most) two batches."""
        fresh = [[p.start, p.end - p.start, 0, p.start, 0] for p in prefills if p.context_slots is None]
        rows: list[list[int]] = []
        slots: list[torch.Tensor] = []
        key_start = 0
        for p in prefills:
            if p.context_slots is None:
                continue
            q_len, num_keys = p.end - p.start, p.context_slots.shape[0]
            first_key = p.num_context_tokens + q_len - num_keys  # the slots start at the window's first
            rows.append([p.start, q_len, p.num_context_tokens, key_start, first_key])
            slots.append(p.context_slots)
            key_start += num_keys
        batches = []
        if fresh:
            batches.append(PrefillBatch._of(fresh, None, device))
        if rows:
            batches.append(PrefillBatch._of(rows, torch.cat(slots).to(torch.int64), device))
        return batches

    @staticmethod
    def _of(rows: list[list[int]], slots: torch.Tensor | None, device: torch.device) -> PrefillBatch:
        chunks = torch.tensor(rows, dtype=torch.int32, device=device)
        return PrefillBatch(chunks, slots, len(rows), max(r[1] for r in rows))


@triton.jit
def _prefill_kernel(
    q_ptr: tl.tensor,
    k_ptr: tl.tensor,
    v_ptr: tl.tensor,
    k_scale_ptr: tl.tensor,
    v_scale_ptr: tl.tensor,
    slots_ptr: tl.tensor,
    chunks_ptr: tl.tensor,
    out_ptr: tl.tensor,
    scale_log2: tl.tensor,
    window: tl.tensor,
    stride_qt: tl.tensor,
    stride_qh: tl.tensor,
    stride_ot: tl.tensor,
    stride_oh: tl.tensor,
    stride_kh: tl.tensor,
    stride_kr: tl.tensor,
    stride_c: tl.tensor,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FROM_CACHE: tl.constexpr,
    IS_QUANTIZED: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
) -> None:
    chunk = chunks_ptr + tl.program_id(0) * stride_c
    q_len = tl.load(chunk + 1)
    m0 = tl.program_id(1) * BLOCK_M
    if m0 >= q_len:  # a shorter chunk than the longest: nothing here
        return
    q_start = tl.load(chunk)
    num_context = tl.load(chunk + 2)
    key_start = tl.load(chunk + 3)
    first_key = tl.load(chunk + 4)
    head = tl.program_id(2)

    i = m0 + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    is_query = i < q_len
    is_out = is_query[:, None] & (d < HEAD_DIM)[None, :]
    q_rows = (q_start + i).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + d[None, :], mask=is_out, other=0.0)
    q_pos = num_context + i

    # the keys some query of this tile sees: causal up to the last, windowed from the first
    hi = num_context + tl.minimum(m0 + BLOCK_M, q_len) - first_key
    lo = tl.maximum(num_context + m0 - window + 1 - first_key, 0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    head_offset = (head // GROUP).to(tl.int64) * stride_kh
    for start in range(lo, hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        is_key = j < hi
        if FROM_CACHE:  # context: the keys' slots
            rows = tl.load(slots_ptr + key_start + j, mask=is_key, other=0)
        else:  # fresh: the step's own rows
            rows = key_start + j
        k = load_kv_tile(
            k_ptr, k_scale_ptr, head_offset, rows, stride_kr, is_key, q.dtype, HEAD_DIM, BLOCK_D, IS_QUANTIZED
        )
        scores = tl.dot(q.to(DOT_DTYPE), tl.trans(k).to(DOT_DTYPE), input_precision=PRECISION) * scale_log2
        k_pos = first_key + j
        seen = (k_pos[None, :] <= q_pos[:, None]) & (q_pos[:, None] - k_pos[None, :] < window)
        scores = tl.where(seen & is_key[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(scores - m_safe[:, None])
        v = load_kv_tile(
            v_ptr, v_scale_ptr, head_offset, rows, stride_kr, is_key, q.dtype, HEAD_DIM, BLOCK_D, IS_QUANTIZED
        )
        acc = acc * alpha[:, None] + tl.dot(
            p.to(v.dtype).to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=PRECISION
        )
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # 0 only on rows past the chunk, never stored
    out = out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + d[None, :]
    tl.store(out, o.to(out_ptr.dtype.element_ty), mask=is_out)


def prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch: PrefillBatch,
    scale: float,
    out: torch.Tensor,
    window: int | None = None,
    *,
    block_m: int = 64,
    block_n: int = 64,
) -> None:
    """Attention of ``batch``'s chunks, written to their rows of ``out``.

    q, out: [T, heads, dim] (the whole flat batch; token rows may be strided, dims packed); k, v:
    [T, kv_heads, dim], read for fresh chunks; caches: [kv_heads, slots, width], read through
    ``batch.slots`` for chunks with context; window: a query sees the last ``window`` keys, None all.
    """
    num_heads, head_dim = q.shape[1], q.shape[2]
    if q.stride(2) != 1:
        q = q.contiguous()
    if batch.slots is None:  # fresh: the keys are the step's rows
        if k.stride() != v.stride() or k.stride(2) != 1:
            k, v = k.contiguous(), v.contiguous()
        keys, values, slots = k, v, batch.chunks
        stride_kh, stride_kr, has_codes = k.stride(1), k.stride(0), False
    else:  # context: the keys are in the cache
        keys, values, slots = k_cache, v_cache, batch.slots
        stride_kh, stride_kr = k_cache.stride(0), k_cache.stride(1)
        has_codes = is_quantized(k_cache)
    dot = DotConfig.of(q.dtype)
    grid = (batch.num_chunks, triton.cdiv(batch.max_q_len, block_m), num_heads)
    _prefill_kernel[grid](
        q,
        keys,
        values,
        scale_view(keys),
        scale_view(values),
        slots,
        batch.chunks,
        out,
        scale * math.log2(math.e),
        window or NO_WINDOW,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        stride_kh,
        stride_kr,
        batch.chunks.stride(0),
        GROUP=num_heads // k.shape[1],
        HEAD_DIM=head_dim,
        BLOCK_D=block_dim(head_dim),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        FROM_CACHE=batch.slots is not None,
        IS_QUANTIZED=has_codes,
        DOT_DTYPE=dot.dtype,
        PRECISION=dot.precision,
    )
