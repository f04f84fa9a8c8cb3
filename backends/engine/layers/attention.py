"""Paged attention: K/V are written to and read from the block pool through slot indices.

``AttentionMetadata`` is built once per step by the model runner and shared by every layer. The token
batch is flat: the decode tokens (one per sequence) come first, then each prefill chunk. A model that
mixes sliding and full layers (Gemma 3) gets a second, windowed view of the same step for its sliding
layers (``sliding_view``); each layer reads the view it needs through ``view()``. The backend is
an object so a CUDA kernel (FlashAttention / FlashInfer with block tables) can replace ``TorchPagedAttention``
without touching the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F

from backends.engine.layers import kv_quant

if TYPE_CHECKING:
    from backends.engine.kernels.cpu_decode import CpuDecodeKernel


@dataclass
class PrefillChunk:
    """One sequence's query tokens ``[start, end)`` of the flat batch."""

    start: int
    end: int
    num_context_tokens: int
    """Tokens of this sequence already in the cache before this chunk."""
    context_slots: torch.Tensor | None
    """Slots of its keys up to ``end`` (context plus chunk, from the window's first key when the model
    slides); None when there is no context."""
    mask: torch.Tensor | None = None
    """[chunk, keys] bool, True where a query may attend; None means plain causal over the chunk itself.
    Set with context, and on a fresh chunk longer than the sliding window."""


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor
    """[num_tokens] slot (block_id * block_size + offset) where each token's K/V goes."""
    block_size: int = 16
    num_decode_tokens: int = 0
    decode_blocks: torch.Tensor | None = None
    """int64 [num_decodes, max_blocks] block table of every decode sequence, padded with a valid block."""
    decode_lens: torch.Tensor | None = None
    """int32 [num_decodes] context length of each decode sequence, its new token included (counted from
    its first block in ``decode_blocks``, which a sliding window may start past the sequence's first)."""
    sliding_window: int | None = None
    """This view's window: a query at position p sees keys in (p - window, p]; None: full attention."""
    prefills: list[PrefillChunk] = field(default_factory=list)
    sliding_view: AttentionMetadata | None = None
    """The windowed view of this step for sliding layers when the model also has full layers (this one
    is then the full view); None: every layer reads this one."""
    _decode_mask: torch.Tensor | None = None

    def view(self, is_sliding: bool) -> AttentionMetadata:
        """What a layer reads: the windowed view if it slides and the step has one, else this one."""
        if is_sliding and self.sliding_view is not None:
            return self.sliding_view
        return self

    def decode_mask(self) -> torch.Tensor:
        """[num_decodes, 1, 1, max_blocks * block_size] bool, True on real positions inside the window
        (built once a step)."""
        if self._decode_mask is None:
            assert self.decode_blocks is not None and self.decode_lens is not None
            b, max_blocks = self.decode_blocks.shape
            padded_len = max_blocks * self.block_size
            positions = torch.arange(padded_len, device=self.decode_lens.device).unsqueeze(0)
            lens = self.decode_lens.unsqueeze(1)
            mask = positions < lens
            if self.sliding_window is not None:
                mask &= positions >= lens - self.sliding_window
            self._decode_mask = mask.view(b, 1, 1, padded_len)
        return self._decode_mask


class AttentionBackend(Protocol):
    def cache_shape(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, kv_cache_dtype: str = "auto"
    ) -> tuple[int, ...]:
        """The backend picks its KV layout (one tensor each for K and V, per layer); ``kv_cache_dtype``
        "int8" or "fp8" stores quantized rows (``kv_quant``)."""
        ...

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor: ...


class TorchPagedAttention:
    """Pure-torch paged attention; works on any device torch supports.

    q: [T, num_heads, head_dim]; k, v: [T, num_kv_heads, head_dim].
    Cache layout: [num_kv_heads, num_slots, head_dim] (slot = block_id * block_size + offset), kv-head
    major so a gather of slots or whole blocks lands directly in the [kv, batch, length, dim] shape the
    matmuls want, with no transposing copy. With ``--kv-cache-dtype int8|fp8`` a row is head_dim one-byte
    codes and their fp32 scale (``kv_quant``); the torch paths dequantize what they gather, the kernel
    reads the codes in place.

    Decodes go to ``decode_kernel`` when one is given and supports the tensors (the CPU kernel reads K/V
    in place through the block table); the torch path gathers whole blocks, padded to the longest
    sequence, and is the reference the kernel is tested against.
    """

    def __init__(self, decode_kernel: CpuDecodeKernel | None = None) -> None:
        self.decode_kernel = decode_kernel

    def cache_shape(
        self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, kv_cache_dtype: str = "auto"
    ) -> tuple[int, ...]:
        return (num_kv_heads, num_blocks * block_size, kv_quant.row_width(head_dim, kv_cache_dtype))

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        is_quantized = kv_quant.is_quantized(k_cache)
        if is_quantized:  # codes and a scale per row; every read below dequantizes what it gathers
            kv_quant.write(k_cache, meta.slot_mapping, k)
            kv_quant.write(v_cache, meta.slot_mapping, v)
        else:
            k_cache.index_copy_(1, meta.slot_mapping, k.transpose(0, 1))
            v_cache.index_copy_(1, meta.slot_mapping, v.transpose(0, 1))
        num_heads, num_kv_heads = q.shape[1], k.shape[1]
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous, whatever q's strides
        d = meta.num_decode_tokens
        if d:
            assert meta.decode_blocks is not None and meta.decode_lens is not None
            blocks, lens, kernel = meta.decode_blocks, meta.decode_lens, self.decode_kernel
            if kernel is not None and kernel.supports(q, k_cache):
                window = meta.sliding_window  # the kernel reads only the window's keys
                kernel(q[:d], k_cache, v_cache, blocks, lens, meta.block_size, scale, out[:d], window)
            else:
                out[:d] = _decode(q[:d], k_cache, v_cache, blocks, meta.decode_mask(), scale)
        gqa = num_heads != num_kv_heads
        for p in meta.prefills:
            qs = q[p.start : p.end].transpose(0, 1).unsqueeze(0)
            if p.context_slots is None:  # fresh prompt: keys are this chunk's own, causal (and windowed)
                ks = k[p.start : p.end].transpose(0, 1)
                vs = v[p.start : p.end].transpose(0, 1)
                mask, causal = p.mask, p.mask is None
            else:  # later chunk or prefix hit: read the context through the block table
                if is_quantized:
                    ks = kv_quant.gather(k_cache, p.context_slots, q.dtype)
                    vs = kv_quant.gather(v_cache, p.context_slots, q.dtype)
                else:
                    ks = k_cache.index_select(1, p.context_slots)
                    vs = v_cache.index_select(1, p.context_slots)
                mask, causal = p.mask, False
            o = F.scaled_dot_product_attention(
                qs,
                ks.unsqueeze(0),
                vs.unsqueeze(0),
                attn_mask=mask,
                is_causal=causal,
                scale=scale,
                enable_gqa=gqa,
            )
            out[p.start : p.end] = o.squeeze(0).transpose(0, 1)
        return out


def _decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    blocks: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query per sequence against its context; q heads grouped per kv head (GQA/MQA).

    Whole blocks are gathered (one contiguous copy of block_size slots each) into [kv, b, L, d], and
    dequantized there when the cache is quantized.
    """
    b, num_heads, head_dim = q.shape
    num_kv_heads, _, width = k_cache.shape  # width: head_dim, plus the scale's bytes when quantized
    group = num_heads // num_kv_heads
    padded_len = mask.shape[-1]
    block_size = padded_len // blocks.shape[1]
    flat_blocks = blocks.flatten()
    keys = k_cache.view(num_kv_heads, -1, block_size * width).index_select(1, flat_blocks)
    values = v_cache.view(num_kv_heads, -1, block_size * width).index_select(1, flat_blocks)
    keys = keys.view(num_kv_heads, b, padded_len, width)
    values = values.view(num_kv_heads, b, padded_len, width)
    if kv_quant.is_quantized(k_cache):
        keys, values = kv_quant.dequantize(keys, q.dtype), kv_quant.dequantize(values, q.dtype)
    # the padding past each length (the last block's unwritten slots) is never-written memory: it may
    # hold inf or NaN, which a zero probability would not cancel (0 * NaN); its scores are masked below
    values = values.masked_fill(~mask.view(1, b, padded_len, 1), 0.0)
    qg = q.view(b, num_kv_heads, group, head_dim).transpose(0, 1)  # [kv, b, group, d]
    scores = torch.matmul(qg, keys.transpose(-1, -2)) * scale  # [kv, b, group, L]
    scores = scores.masked_fill(~mask.view(1, b, 1, padded_len), float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, values).transpose(0, 1).reshape(b, num_heads, head_dim)


def default_backend(device: torch.device | str = "cpu") -> AttentionBackend:
    """The Triton kernels on CUDA where Triton is installed; else torch paged attention, with the native
    CPU decode kernel where it builds."""
    from backends.engine.kernels import triton

    if torch.device(device).type == "cuda" and triton.is_available():
        from backends.engine.kernels.triton.backend import TritonPagedAttention

        return TritonPagedAttention()
    from backends.engine.kernels import cpu_decode

    return TorchPagedAttention(decode_kernel=cpu_decode.load())
