"""The quantized KV cache is device-agnostic: its writes, reads and the torch attention paths over it run
on torch's ``meta`` device, which has no data, so no CPU-only op, numpy call or host sync can hide in
them; on a CUDA tensor the CPU decode kernel is never chosen."""

from __future__ import annotations

import pytest
import torch

from backends.engine.kernels import cpu_decode
from backends.engine.layers import kv_quant
from backends.engine.layers.attention import AttentionMetadata, PrefillChunk, TorchPagedAttention

META = torch.device("meta")
NUM_KV_HEADS, NUM_HEADS, HEAD_DIM, BLOCK_SIZE, NUM_BLOCKS = 2, 4, 16, 4, 8


def _cache(kv_cache_dtype: str) -> torch.Tensor:
    width = kv_quant.row_width(HEAD_DIM, kv_cache_dtype)
    dtype = kv_quant.storage_dtype(kv_cache_dtype, torch.bfloat16)
    return torch.empty(NUM_KV_HEADS, NUM_BLOCKS * BLOCK_SIZE, width, dtype=dtype, device=META)


@pytest.mark.parametrize("kv_cache_dtype", ["int8", "fp8"])
def test_write_and_gather_run_off_the_cpu(kv_cache_dtype: str) -> None:
    cache = _cache(kv_cache_dtype)
    x = torch.empty(3, NUM_KV_HEADS, HEAD_DIM, dtype=torch.bfloat16, device=META)
    slots = torch.tensor([0, 5, 9], device=META)
    kv_quant.write(cache, slots, x)
    rows = kv_quant.gather(cache, slots, torch.bfloat16)
    assert rows.shape == (NUM_KV_HEADS, 3, HEAD_DIM) and rows.device == META and rows.dtype == torch.bfloat16


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8", "fp8"])
def test_torch_attention_over_a_quantized_cache_runs_off_the_cpu(kv_cache_dtype: str) -> None:
    """A step of two decodes and a prefill chunk with context, through a backend that holds the CPU
    kernel: off the CPU the torch paths take every part."""
    k_cache, v_cache = _cache(kv_cache_dtype), _cache(kv_cache_dtype)
    if kv_cache_dtype == "auto":
        k_cache, v_cache = (
            torch.empty(c.shape, dtype=torch.bfloat16, device=META) for c in (k_cache, v_cache)
        )
    num_tokens = 2 + 3
    q = torch.empty(num_tokens, NUM_HEADS, HEAD_DIM, dtype=torch.bfloat16, device=META)
    k = torch.empty(num_tokens, NUM_KV_HEADS, HEAD_DIM, dtype=torch.bfloat16, device=META)
    meta = AttentionMetadata(
        slot_mapping=torch.empty(num_tokens, dtype=torch.long, device=META),
        block_size=BLOCK_SIZE,
        num_decode_tokens=2,
        decode_blocks=torch.empty(2, 3, dtype=torch.long, device=META),
        decode_lens=torch.empty(2, dtype=torch.int32, device=META),
    )
    context = torch.empty(7, dtype=torch.long, device=META)
    mask = torch.empty(3, 7, dtype=torch.bool, device=META)
    meta.prefills.append(PrefillChunk(2, 5, 4, context, mask))
    backend = TorchPagedAttention(decode_kernel=cpu_decode.load())
    out = backend.forward(q, k, k.clone(), k_cache, v_cache, meta, HEAD_DIM**-0.5)
    assert out.shape == q.shape and out.device == META


def test_the_cpu_decode_kernel_never_takes_another_devices_tensors() -> None:
    q = torch.empty(2, NUM_HEADS, HEAD_DIM, device=META)
    assert not cpu_decode.CpuDecodeKernel.supports(q, _cache("fp8"))
