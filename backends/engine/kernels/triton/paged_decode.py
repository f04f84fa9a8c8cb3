"""Paged decode attention: one query token per sequence, its K/V read in place through the block table.

A program takes one (sequence, kv head, partition): the ``group`` query heads that share the kv head
(GQA; MQA and MHA are groups of all heads and of one) form the rows of one ``tl.dot`` against a tile of
``block_n`` keys, padded to 16 rows, so every K/V row is loaded once for its whole group. Keys are found
token by token: position t lives in slot ``table[t // block_size] * block_size + t % block_size``, so any
block size works and nothing is gathered into a padded copy first. Softmax is online (running max and
sum, in base 2 with log2(e) folded into the scale), in fp32 whatever q's dtype.

Split-K (flash-decoding, vLLM's paged_attention_v2): a sequence's positions are cut into partitions of
``partition_size`` tokens, each its own program, so a few long sequences still fill the GPU. Each writes
its unnormalized accumulator, running max and sum; a second kernel combines them per (sequence, head):
``out = sum_p acc_p * 2^(m_p - M) / sum_p l_p * 2^(m_p - M)`` with ``M = max_p m_p``. Partitions a short
sequence (or a window) leaves empty write max = -inf and weigh nothing. With one partition the first
kernel normalizes and writes the output itself. The count of partitions follows the block table's width,
not the lengths (no host sync), and is a runtime argument: a wider table compiles no new partition
kernel, and a new reduction only past a power of two.

A sliding window starts each sequence at ``len - window`` (``AttentionMetadata.decode_lens`` counts from
the table's first block, which the runner may already have cut to the window).
"""

from __future__ import annotations

import math

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


@triton.jit
def _decode_partition(
    q_ptr: tl.tensor,
    k_cache_ptr: tl.tensor,
    v_cache_ptr: tl.tensor,
    k_scale_ptr: tl.tensor,
    v_scale_ptr: tl.tensor,
    blocks_ptr: tl.tensor,
    lens_ptr: tl.tensor,
    out_ptr: tl.tensor,
    part_acc_ptr: tl.tensor,
    part_max_ptr: tl.tensor,
    part_sum_ptr: tl.tensor,
    scale_log2: tl.tensor,
    window: tl.tensor,
    stride_qt: tl.tensor,
    stride_qh: tl.tensor,
    stride_ot: tl.tensor,
    stride_oh: tl.tensor,
    stride_ch: tl.tensor,
    stride_cs: tl.tensor,
    stride_bt: tl.tensor,
    num_partitions: tl.tensor,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PARTITION_SIZE: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    IS_QUANTIZED: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    PRECISION: tl.constexpr,
) -> None:
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)
    seq_len = tl.load(lens_ptr + seq)
    lo = tl.maximum(part * PARTITION_SIZE, seq_len - window)  # window: the query sees (len-1-w, len-1]
    hi = tl.minimum((part + 1) * PARTITION_SIZE, seq_len)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * GROUP + g
    is_out = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + seq.to(tl.int64) * stride_qt + heads[:, None] * stride_qh + d[None, :], is_out, 0.0)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    head_offset = kv_head.to(tl.int64) * stride_ch
    table = blocks_ptr + seq.to(tl.int64) * stride_bt
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        is_key = pos < hi
        block = tl.load(table + pos // BLOCK_SIZE, mask=is_key, other=0)
        slots = block * BLOCK_SIZE + pos % BLOCK_SIZE
        k = load_kv_tile(
            k_cache_ptr,
            k_scale_ptr,
            head_offset,
            slots,
            stride_cs,
            is_key,
            q.dtype,
            HEAD_DIM,
            BLOCK_D,
            IS_QUANTIZED,
        )
        scores = tl.dot(q.to(DOT_DTYPE), tl.trans(k).to(DOT_DTYPE), input_precision=PRECISION) * scale_log2
        scores = tl.where(is_key[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))  # finite: every tile holds a key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[:, None])
        v = load_kv_tile(
            v_cache_ptr,
            v_scale_ptr,
            head_offset,
            slots,
            stride_cs,
            is_key,
            q.dtype,
            HEAD_DIM,
            BLOCK_D,
            IS_QUANTIZED,
        )
        acc = acc * alpha[:, None] + tl.dot(
            p.to(v.dtype).to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=PRECISION
        )
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    if not IS_SPLIT:  # the whole sequence was here: normalize and write the output
        o = acc / l_i[:, None]
        out = out_ptr + seq.to(tl.int64) * stride_ot + heads[:, None] * stride_oh + d[None, :]
        tl.store(out, o.to(out_ptr.dtype.element_ty), mask=is_out)
    else:  # this partition's share, combined by _reduce_partitions
        row = (seq * (tl.num_programs(1) * GROUP) + heads).to(tl.int64) * num_partitions + part
        tl.store(part_acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=is_out)
        tl.store(part_max_ptr + row, m_i, mask=g < GROUP)
        tl.store(part_sum_ptr + row, l_i, mask=g < GROUP)


@triton.jit
def _reduce_partitions(
    part_acc_ptr: tl.tensor,
    part_max_ptr: tl.tensor,
    part_sum_ptr: tl.tensor,
    out_ptr: tl.tensor,
    stride_ot: tl.tensor,
    stride_oh: tl.tensor,
    num_partitions: tl.tensor,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_P: tl.constexpr,
) -> None:
    """One program per (sequence, head): the partitions' accumulators rescaled to the global max."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    p = tl.arange(0, BLOCK_P)
    d = tl.arange(0, BLOCK_D)
    is_part = p < num_partitions
    rows = (seq * tl.num_programs(1) + head).to(tl.int64) * num_partitions + p
    m = tl.load(part_max_ptr + rows, mask=is_part, other=float("-inf"))
    weights = tl.exp2(m - tl.max(m, 0))  # an empty partition's -inf weighs 0
    total = tl.sum(tl.load(part_sum_ptr + rows, mask=is_part, other=0.0) * weights, 0)
    mask = is_part[:, None] & (d < HEAD_DIM)[None, :]
    acc = tl.load(part_acc_ptr + rows[:, None] * HEAD_DIM + d[None, :], mask=mask, other=0.0)
    o = tl.sum(acc * weights[:, None], 0) / total
    out = out_ptr + seq.to(tl.int64) * stride_ot + head * stride_oh + d
    tl.store(out, o.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    blocks: torch.Tensor,
    lens: torch.Tensor,
    block_size: int,
    scale: float,
    out: torch.Tensor,
    window: int | None = None,
    *,
    partition_size: int = 512,
    block_n: int = 32,
) -> None:
    """``out[s] = softmax(q[s] . K[s]^T * scale) V[s]``, one query per sequence.

    q, out: [b, heads, dim] (token rows may be strided, dims packed); caches: [kv_heads, slots, width];
    blocks: int64 [b, max_blocks]; lens: int32 [b], the new token included; window: the query sees the
    last ``window`` keys, None all. ``partition_size`` (a multiple of ``block_n``) is split-K's cut.
    """
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[0]
    group = num_heads // num_kv_heads
    if partition_size % block_n or num_heads % num_kv_heads or k_cache.stride() != v_cache.stride():
        raise ValueError("paged_decode: partition_size must be a multiple of block_n, heads of kv heads")
    if q.stride(2) != 1:
        q = q.contiguous()
    num_partitions = max(1, math.ceil(blocks.shape[1] * block_size / partition_size))
    block_d = block_dim(head_dim)
    dot = DotConfig.of(q.dtype)
    if num_partitions > 1:  # split-K: partials, then their reduction
        part_acc = torch.empty(num_seqs, num_heads, num_partitions, head_dim, device=q.device)
        part_max = torch.empty(num_seqs, num_heads, num_partitions, device=q.device)
        part_sum = torch.empty_like(part_max)
    else:
        part_acc = part_max = part_sum = out  # never touched
    _decode_partition[(num_seqs, num_kv_heads, num_partitions)](
        q,
        k_cache,
        v_cache,
        scale_view(k_cache),
        scale_view(v_cache),
        blocks,
        lens,
        out,
        part_acc,
        part_max,
        part_sum,
        scale * math.log2(math.e),
        window or NO_WINDOW,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        blocks.stride(0),
        num_partitions,
        GROUP=group,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_SIZE=block_size,
        BLOCK_N=block_n,
        PARTITION_SIZE=partition_size,
        IS_SPLIT=num_partitions > 1,
        IS_QUANTIZED=is_quantized(k_cache),
        DOT_DTYPE=dot.dtype,
        PRECISION=dot.precision,
    )
    if num_partitions > 1:
        _reduce_partitions[(num_seqs, num_heads)](
            part_acc,
            part_max,
            part_sum,
            out,
            out.stride(0),
            out.stride(1),
            num_partitions,
            HEAD_DIM=head_dim,
            BLOCK_D=block_d,
            BLOCK_P=triton.next_power_of_2(num_partitions),
        )
