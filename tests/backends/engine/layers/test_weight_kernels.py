"""The quantized layers' paths by device, checked without a GPU: which kernel each device gets, the CUDA
int4 packing, and the dequantize fallbacks against the CPU kernels."""

from __future__ import annotations

import pytest
import torch

from backends.engine.layers import int4, int8, weight_kernels
from backends.engine.layers.int4 import (
    Int4Weight,
    cuda_inner_k_tiles,
    int4_path,
    pack_nibbles,
    quantize_int4,
    unpack_nibbles,
)
from backends.engine.layers.int8 import Int8Weight
from backends.engine.layers.weight_kernels import has_kernel

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm())


def test_kernels_are_looked_up_per_device_type() -> None:
    assert has_kernel("aten::_weight_int8pack_mm", CPU)
    assert has_kernel("aten::_weight_int4pack_mm_for_cpu", CPU)
    assert not has_kernel("aten::_weight_int8pack_mm", torch.device("meta"))  # no dispatch key of ours
    if not torch.cuda.is_available():  # a CPU build registers no CUDA kernel
        assert not has_kernel("aten::_weight_int4pack_mm", CUDA)


def test_other_devices_are_refused() -> None:
    with pytest.raises(ValueError, match="CPU and CUDA"):
        Int8Weight(torch.zeros(16, 32, device="meta"), None)
    with pytest.raises(ValueError, match="CPU and CUDA"):
        Int4Weight.from_float(torch.zeros(16, 64, device="meta"), None)


def test_int4_path_by_device_kernel_and_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    assert int4_path(CPU, 960, 576) == "cpu"
    monkeypatch.setattr(int4, "has_kernel", lambda op, device: device.type == "cuda")
    assert int4_path(CUDA, 960, 576) == "cuda"  # SmolLM2's q|k|v: 576 columns tile by 4
    assert int4_path(CUDA, 1536 * 2, 576) == "cuda"
    assert int4_path(CUDA, 576, 1536) == "cuda"
    assert int4_path(CUDA, 20, 576) == "dequantize"  # rows not a multiple of 8
    assert int4_path(CUDA, 960, 48) == "dequantize"  # 48 columns: no tiling of 2, 4 or 8 by 16
    monkeypatch.setattr(int4, "has_kernel", lambda op, device: False)
    assert int4_path(CUDA, 960, 576) == "dequantize"  # a build without tinygemm


def test_inner_k_tiles_take_the_widest_that_divides() -> None:
    assert cuda_inner_k_tiles(2048) == 8
    assert cuda_inner_k_tiles(576) == 4
    assert cuda_inner_k_tiles(96) == 2
    assert cuda_inner_k_tiles(40) is None


def test_nibbles_pack_even_columns_high_and_unpack_back() -> None:
    q = torch.tensor([[1, 2, 15, 0], [7, 8, 9, 10]], dtype=torch.uint8)
    packed = pack_nibbles(q)
    assert packed.dtype == torch.uint8 and packed.tolist() == [[0x12, 0xF0], [0x78, 0x9A]]
    every = torch.randint(0, 16, (32, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(unpack_nibbles(pack_nibbles(every)), every)


@pytest.mark.parametrize("num_rows", [1, 9, 64])
def test_int4_dequantize_path_matches_the_cpu_kernel(num_rows: int) -> None:
    gen = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(48, 128, generator=gen), torch.randn(48, generator=gen)
    q, scale, zero = quantize_int4(weight)
    kernel = Int4Weight(q, scale, zero, bias)
    fallback = Int4Weight(q, scale, zero, bias, path="dequantize")
    assert kernel.path == "cpu" and fallback.path == "dequantize"
    assert fallback.packed.shape == (48, 64) and fallback.num_weight_bytes < kernel.num_weight_bytes * 1.01
    assert torch.allclose(fallback.dequantized(), kernel.dequantized(), atol=1e-5)
    x = torch.randn(num_rows, 128, generator=gen)
    got, want = fallback.matmul(x), kernel.matmul(x)
    assert got.dtype == torch.float32 and _rel_error(got, want) < 1e-2  # the kernel rounds x to bf16
    assert _rel_error(fallback.matmul(x.bfloat16()), want) < 2e-2


def test_int8_paths_by_device_and_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    weight = torch.randn(32, 64, generator=torch.Generator().manual_seed(2))
    on_cpu = Int8Weight(weight, None)
    assert on_cpu.has_kernel and on_cpu.uses_kernel(4096)  # the CPU kernel takes every batch
    fallback = Int8Weight(weight, None, use_kernel=False)
    assert not fallback.uses_kernel(1)
    # on CUDA: the kernel for decode-sized batches only (the rows are what matter, not the device)
    on_cpu.max_kernel_rows = int8.CUDA_KERNEL_MAX_ROWS
    assert on_cpu.uses_kernel(1) and on_cpu.uses_kernel(8) and not on_cpu.uses_kernel(9)
    monkeypatch.setattr(
        weight_kernels.torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda op, key: True
    )
    assert has_kernel(int8.KERNEL_OP, CUDA)


@pytest.mark.parametrize("num_rows", [1, 9, 64])
def test_int8_dequantize_path_matches_the_kernel(num_rows: int) -> None:
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(48, 64, generator=gen), torch.randn(48, generator=gen)
    kernel, fallback = Int8Weight(weight, bias), Int8Weight(weight, bias, use_kernel=False)
    x = torch.randn(2, num_rows, 64, generator=gen)
    got, want = fallback.matmul(x), kernel.matmul(x)
    assert got.shape == (2, num_rows, 48) and got.dtype == torch.float32
    assert _rel_error(got, want) < 1e-2  # the kernel rounds x to bf16
    assert _rel_error(got, x @ fallback.dequantized().t() + bias) < 1e-5
