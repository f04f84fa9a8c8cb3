"""The native CPU decode kernel against the torch reference path, and its build and fallback."""

from __future__ import annotations

import platform
import random
from pathlib import Path

import pytest
import torch

from backends.engine.kernels import cpu_decode
from backends.engine.layers.attention import AttentionMetadata, TorchPagedAttention, _decode

BLOCK_SIZE = 16


@pytest.fixture(scope="module")
def kernel() -> cpu_decode.CpuDecodeKernel:
    loaded = cpu_decode.load()
    if loaded is None:
        pytest.skip("no C compiler here: the engine runs on its torch path")
    return loaded


def _case(
    num_heads: int, num_kv_heads: int, head_dim: int, lens: list[int], dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    num_blocks = 256
    shape = (num_kv_heads, num_blocks * BLOCK_SIZE, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(dtype)
    v_cache = torch.randn(shape, generator=gen).to(dtype)
    max_blocks = -(-max(lens) // BLOCK_SIZE)
    tables = []
    for n in lens:  # each sequence owns distinct, scattered blocks; padding repeats its first block
        own = rng.sample(range(num_blocks), -(-n // BLOCK_SIZE))
        tables.append(own + [own[0]] * (max_blocks - len(own)))
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(1, dtype=torch.long),
        block_size=BLOCK_SIZE,
        num_decode_tokens=len(lens),
        decode_blocks=torch.tensor(tables, dtype=torch.long),
        decode_lens=torch.tensor(lens, dtype=torch.int32),
    )
    q = torch.randn(len(lens), num_heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, meta


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim"),
    [(9, 3, 64), (4, 4, 32), (8, 1, 16), (6, 2, 128)],
    ids=["gqa", "mha", "mqa", "wide"],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_torch_path_fp32(
    kernel: cpu_decode.CpuDecodeKernel, num_heads: int, num_kv_heads: int, head_dim: int, threads: int
) -> None:
    lens = [1, 15, 16, 17, 33, 200, 511, 64]  # one token, block edges, several blocks
    q, k_cache, v_cache, meta = _case(num_heads, num_kv_heads, head_dim, lens, torch.float32)
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    expected = _decode(q, k_cache, v_cache, meta.decode_blocks, meta.decode_mask(), head_dim**-0.5)
    out = torch.empty_like(q)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, head_dim**-0.5, out)
    finally:
        torch.set_num_threads(previous)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_queries_may_be_rows_of_a_wider_tensor(
    kernel: cpu_decode.CpuDecodeKernel, dtype: torch.dtype
) -> None:
    """q as the model hands it over: the first heads of each row of a fused q|k|v output."""
    q, k_cache, v_cache, meta = _case(9, 3, 64, [5, 40, 17, 300], dtype)
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    qkv = torch.randn(len(q), (9 + 2 * 3) * 64).to(dtype)
    qkv[:, : 9 * 64] = q.reshape(len(q), -1)
    strided = qkv[:, : 9 * 64].view(len(q), 9, 64)
    assert not strided.is_contiguous() and kernel.supports(strided, k_cache)
    expected, got = torch.empty_like(q), torch.empty_like(q)

    kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, 0.125, expected)
    kernel(strided, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, 0.125, got)

    assert torch.equal(got, expected)


def test_matches_torch_path_bf16(kernel: cpu_decode.CpuDecodeKernel) -> None:
    q, k_cache, v_cache, meta = _case(9, 3, 64, [5, 100, 300], torch.bfloat16)
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    expected = _decode(q, k_cache, v_cache, meta.decode_blocks, meta.decode_mask(), 0.125)
    out = torch.empty_like(q)
    kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, 0.125, out)
    torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=2e-2)


def _dense_windowed(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, window: int
) -> torch.Tensor:
    """Reference: each sequence's last min(len, window) keys, read slot by slot, plain softmax."""
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    group = q.shape[1] // k_cache.shape[0]
    outs = []
    for s, n in enumerate(meta.decode_lens.tolist()):
        table = meta.decode_blocks[s]
        slots = torch.tensor([int(table[t // BLOCK_SIZE]) * BLOCK_SIZE + t % BLOCK_SIZE for t in range(n)])
        slots = slots[max(0, n - window) :]
        keys = k_cache[:, slots].float().repeat_interleave(group, 0)  # [heads, L, d]
        values = v_cache[:, slots].float().repeat_interleave(group, 0)
        probs = torch.softmax(torch.einsum("hd,hld->hl", q[s].float(), keys) * q.shape[-1] ** -0.5, -1)
        outs.append(torch.einsum("hl,hld->hd", probs, values))
    return torch.stack(outs).to(q.dtype)


@pytest.mark.parametrize("window", [1, 5, 16, 20, 64])
@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "head_dim"), [(9, 3, 64), (8, 1, 16)], ids=["gqa-fixed", "mqa-general"]
)
def test_sliding_window_matches_a_dense_reference(
    kernel: cpu_decode.CpuDecodeKernel, window: int, num_heads: int, num_kv_heads: int, head_dim: int
) -> None:
    """Both decode paths see exactly the last ``window`` keys: shorter sequences, cuts inside a block
    and on its edge."""
    lens = [1, 4, 15, 16, 17, 33, 100, 200]
    q, k_cache, v_cache, meta = _case(num_heads, num_kv_heads, head_dim, lens, torch.float32, seed=3)
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    meta.sliding_window = window
    expected = _dense_windowed(q, k_cache, v_cache, meta, window)
    scale = head_dim**-0.5
    torch_path = _decode(q, k_cache, v_cache, meta.decode_blocks, meta.decode_mask(), scale)
    torch.testing.assert_close(torch_path, expected, rtol=1e-5, atol=1e-5)
    out = torch.empty_like(q)
    kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, scale, out, window)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_sliding_window_bf16(kernel: cpu_decode.CpuDecodeKernel) -> None:
    q, k_cache, v_cache, meta = _case(9, 3, 64, [5, 100, 300], torch.bfloat16)
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    expected = _dense_windowed(q, k_cache, v_cache, meta, 24)
    out = torch.empty_like(q)
    kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, 0.125, out, 24)
    torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=2e-2)


def test_backend_writes_new_tokens_then_attends(kernel: cpu_decode.CpuDecodeKernel) -> None:
    """Through TorchPagedAttention.forward: the new K/V land in the cache first, both paths agree."""
    q, k_cache, v_cache, meta = _case(9, 3, 64, [3, 40], torch.float32)
    assert meta.decode_blocks is not None
    tables = meta.decode_blocks.tolist()
    meta.slot_mapping = torch.tensor([tables[0][0] * BLOCK_SIZE + 2, tables[1][2] * BLOCK_SIZE + 7])
    k_new, v_new = torch.randn(2, 3, 64), torch.randn(2, 3, 64)
    outs = []
    for backend in (TorchPagedAttention(decode_kernel=kernel), TorchPagedAttention()):
        kc, vc = k_cache.clone(), v_cache.clone()
        outs.append(backend.forward(q, k_new, v_new, kc, vc, meta, 0.125))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_rejects_lengths_beyond_the_block_table(kernel: cpu_decode.CpuDecodeKernel) -> None:
    q, k_cache, v_cache, meta = _case(9, 3, 64, [20], torch.float32)
    assert meta.decode_blocks is not None
    with pytest.raises(ValueError, match="rejected"):
        too_long = torch.tensor([33], dtype=torch.int32)  # two blocks in the table, 33 tokens asked
        kernel(q, k_cache, v_cache, meta.decode_blocks, too_long, 16, 1.0, q.clone())


def test_supports_only_cpu_fp32_and_bf16(kernel: cpu_decode.CpuDecodeKernel) -> None:
    x = torch.zeros(2, 3, 4)
    assert kernel.supports(x, x)
    assert kernel.supports(x.bfloat16(), x.bfloat16())
    assert not kernel.supports(x.half(), x.half())
    assert not kernel.supports(x.transpose(0, 1), x)


def test_builds_the_widest_vector_path_this_cpu_has(kernel: cpu_decode.CpuDecodeKernel) -> None:
    """``-march=native``: AVX-512 where the CPU has it, else AVX2 with FMA, else the portable loops."""
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() not in ("x86_64", "AMD64") or not cpuinfo.exists():
        assert kernel.isa == "portable"
        return
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    expected = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else "portable"
    assert kernel.isa == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_vector_path_matches_the_portable_loops(
    kernel: cpu_decode.CpuDecodeKernel, dtype: torch.dtype
) -> None:
    lens = [1, 15, 16, 17, 33, 200, 511, 64]
    q, k_cache, v_cache, meta = _case(9, 3, 64, lens, dtype)
    assert meta.decode_blocks is not None and meta.decode_lens is not None
    outs = []
    for portable in (False, True):
        kernel.portable = portable
        try:
            out = torch.empty_like(q)
            kernel(q, k_cache, v_cache, meta.decode_blocks, meta.decode_lens, BLOCK_SIZE, 0.125, out)
        finally:
            kernel.portable = False
        outs.append(out)
    if dtype == torch.float32:
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    else:  # bf16 outputs: torch's bf16 tolerances
        torch.testing.assert_close(outs[0], outs[1])


def test_falls_back_to_torch_without_a_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SORTYARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    cpu_decode.load.cache_clear()
    try:
        assert cpu_decode.load() is None
    finally:
        cpu_decode.load.cache_clear()


def test_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SORTYARD_CPU_KERNELS", "0")
    cpu_decode.load.cache_clear()
    try:
        assert cpu_decode.load() is None
    finally:
        cpu_decode.load.cache_clear()
