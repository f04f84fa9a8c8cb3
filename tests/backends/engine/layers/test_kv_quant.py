"""KV-cache quantization: the packed row format, its round trip, and paged attention over it."""

from __future__ import annotations

import pytest
import torch

from backends.engine.layers import kv_quant
from backends.engine.layers.attention import AttentionMetadata, PrefillChunk, TorchPagedAttention

QUANT = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}


@pytest.mark.parametrize("model_dtype", [torch.float32, torch.bfloat16])
def test_round_trip_error_is_within_a_code_step(model_dtype: torch.dtype) -> None:
    x = (torch.randn(7, 3, 64) * torch.logspace(-3, 3, 7).view(7, 1, 1)).to(model_dtype)
    amax = x.float().abs().amax(-1, keepdim=True)
    for name, dtype in QUANT.items():
        packed = kv_quant.quantize(x, dtype)
        assert packed.dtype == dtype and packed.shape == (7, 3, 64 + kv_quant.SCALE_BYTES)
        back = kv_quant.dequantize(packed, torch.float32)
        err = (back - x.float()).abs()
        if name == "int8":  # half a step of amax / 127, plus the model dtype's rounding of the input
            assert (err <= amax / 254 * 1.01).all()
        else:  # 3 mantissa bits: half an ulp is 1/16 of the value, subnormals a step of amax / 448 * 2^-9
            assert (err <= x.float().abs() / 16 + amax / 448 * 2**-9).all()
        assert back.to(model_dtype).dtype == model_dtype


def test_zero_and_extreme_rows() -> None:
    x = torch.zeros(2, 1, 8)
    x[1, 0, 0] = 1e6  # far past fp8's 448: the scale brings it in range
    for dtype in QUANT.values():
        back = kv_quant.dequantize(kv_quant.quantize(x, dtype), torch.float32)
        assert torch.equal(back[0], x[0])  # an all-zero row stays zero (no 0 / 0)
        assert back[1, 0, 0] == pytest.approx(1e6, rel=1e-6)
        assert not back.isnan().any()


def test_row_sizes() -> None:
    assert kv_quant.row_width(64, "auto") == 64
    assert kv_quant.row_width(64, "int8") == kv_quant.row_width(64, "fp8") == 68
    assert kv_quant.row_bytes(64, 2, "auto") == 128 and kv_quant.row_bytes(64, 4, "auto") == 256
    assert kv_quant.row_bytes(64, 2, "int8") == kv_quant.row_bytes(64, 4, "fp8") == 68
    assert kv_quant.storage_dtype("auto", torch.bfloat16) == torch.bfloat16
    assert kv_quant.storage_dtype("fp8", torch.bfloat16) == torch.float8_e4m3fn
    with pytest.raises(ValueError):
        kv_quant.row_width(30, "int8")  # the fp32 scale would sit unaligned


def test_write_then_gather_by_slot() -> None:
    cache = torch.zeros(2, 32, 16 + kv_quant.SCALE_BYTES, dtype=torch.int8)
    x = torch.randn(3, 2, 16)
    slots = torch.tensor([5, 17, 30])
    kv_quant.write(cache, slots, x)
    back = kv_quant.gather(cache, slots, torch.float32)  # [kv, 3, dim]
    torch.testing.assert_close(back.transpose(0, 1), x, rtol=0, atol=x.abs().max().item() / 127)


@pytest.mark.parametrize("cache", ["int8", "fp8"])
@pytest.mark.parametrize("window", [None, 6])
def test_paged_attention_reads_a_quantized_cache_like_a_float_one(cache: str, window: int | None) -> None:
    """One decode and one later prefill chunk (context read through its slots, as a speculative step's
    rows would be), on both caches: the torch paths dequantize what they gather."""
    gen = torch.Generator().manual_seed(0)
    num_heads, num_kv_heads, head_dim, num_slots = 4, 2, 16, 64
    past = 20  # both sequences' tokens already cached: sequence 0 in slots 0..19, sequence 1 in 32..51
    k_past = torch.randn(2 * past, num_kv_heads, head_dim, generator=gen)
    v_past = torch.randn(2 * past, num_kv_heads, head_dim, generator=gen)
    past_slots = torch.cat([torch.arange(past), torch.arange(32, 32 + past)])
    q = torch.randn(4, num_heads, head_dim, generator=gen)  # decode row 0, then a chunk of 3 (rows 1..3)
    k, v = torch.randn(4, num_kv_heads, head_dim, generator=gen), torch.randn(4, num_kv_heads, head_dim)
    first_key = 0 if window is None else past - window + 1  # the chunk's first query's window start
    context = torch.arange(32 + first_key, 32 + past + 3)
    key_pos, query_pos = (
        torch.arange(first_key, past + 3).unsqueeze(0),
        torch.arange(past, past + 3).unsqueeze(1),
    )
    mask = key_pos <= query_pos
    if window is not None:
        mask &= query_pos - key_pos < window
    meta = AttentionMetadata(
        slot_mapping=torch.tensor([past, 32 + past, 32 + past + 1, 32 + past + 2]),
        num_decode_tokens=1,
        decode_blocks=torch.tensor([[0, 1]]),
        decode_lens=torch.tensor([past + 1], dtype=torch.int32),
        sliding_window=window,
        prefills=[PrefillChunk(1, 4, past, context, mask)],
    )
    outs = []
    backend = TorchPagedAttention()
    for dtype in (torch.float32, QUANT[cache]):
        width = kv_quant.row_width(head_dim, "auto" if dtype == torch.float32 else cache)
        k_cache = torch.zeros(num_kv_heads, num_slots, width, dtype=dtype)
        v_cache = torch.zeros_like(k_cache)
        warm = AttentionMetadata(slot_mapping=past_slots, prefills=[PrefillChunk(0, 2 * past, 0, None)])
        backend.forward(torch.zeros(2 * past, num_heads, head_dim), k_past, v_past, k_cache, v_cache, warm, 1)
        outs.append(backend.forward(q, k, v, k_cache, v_cache, meta, head_dim**-0.5))
    tol = 0.02 if cache == "int8" else 0.1
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=tol)


@pytest.mark.parametrize("cache", ["int8", "fp8"])
def test_torch_decode_ignores_garbage_past_the_length(cache: str) -> None:
    """The torch path gathers whole blocks: never-written slots (here all 0xff bytes: NaN scales, NaN fp8
    codes) must not reach the output."""
    k_cache = torch.full((1, 32, 16 + kv_quant.SCALE_BYTES), 0xFF, dtype=torch.uint8).view(QUANT[cache])
    v_cache = k_cache.clone()
    x = torch.randn(5, 1, 16)
    kv_quant.write(k_cache, torch.arange(5), x)
    kv_quant.write(v_cache, torch.arange(5), x)
    meta = AttentionMetadata(
        slot_mapping=torch.tensor([5]),
        num_decode_tokens=1,
        decode_blocks=torch.tensor([[0]]),
        decode_lens=torch.tensor([6], dtype=torch.int32),
    )
    q, k, v = torch.randn(1, 2, 16), torch.randn(1, 1, 16), torch.randn(1, 1, 16)
    out = TorchPagedAttention().forward(q, k, v, k_cache, v_cache, meta, 0.25)
    assert out.isfinite().all()
