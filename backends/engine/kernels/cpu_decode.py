"""Calls ``paged_decode.c`` through ctypes, built once per machine by ``kernels/build.py``.

The kernel reads each decode sequence's K/V in place through its block table, so a decode step costs one
pass over the live KV instead of a gather copy padded to the longest sequence. Where no compiler works,
or ``SORTYARD_CPU_KERNELS=0``, ``load()`` returns None and attention uses its torch path.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import subprocess
from pathlib import Path

import torch

from backends.engine.kernels import KV_SCALE_BYTES as SCALE_BYTES
from backends.engine.kernels import cpu_kernels_enabled
from backends.engine.kernels.build import build

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("paged_decode.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1}
KV_DTYPES = {torch.int8: 1, torch.float8_e4m3fn: 2}
"""Quantized caches the kernel reads in place (code times the row's scale, ``layers/kv_quant.py``); code 0
is K/V in q's dtype."""


class CpuDecodeKernel:
    """``out[s] = softmax(q[s] . K[s]^T * scale) V[s]`` for one query token per sequence, on CPU; with a
    sliding window, K[s] and V[s] are the sequence's last ``window`` tokens."""

    def __init__(self, library: ctypes.CDLL) -> None:
        fn = library.paged_decode
        fn.restype = ctypes.c_int
        fn.argtypes = [
            *(ctypes.c_void_p,) * 6,
            *(ctypes.c_int,) * 6,
            ctypes.c_int64,
            ctypes.c_float,
            *(ctypes.c_int,) * 4,
            ctypes.c_int64,
        ]
        self._fn = fn
        isa = library.paged_decode_isa
        isa.restype = ctypes.c_char_p
        isa.argtypes = []
        self.isa: str = isa().decode()
        """The vector path this build runs where the shapes allow: "avx512", "avx2" or "portable"."""
        self._portable = ctypes.c_int.in_dll(library, "paged_decode_portable")

    @property
    def portable(self) -> bool:
        """True: the portable loops run even where the vector path fits (to time or test both)."""
        return bool(self._portable.value)

    @portable.setter
    def portable(self, value: bool) -> None:
        self._portable.value = int(value)

    @staticmethod
    def supports(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
        """q on the CPU in fp32 or bf16, each token's heads contiguous (the tokens may be rows of a wider
        tensor, such as q of a fused q|k|v output); the cache contiguous."""
        return (
            q.device.type == "cpu"
            and q.dtype in DTYPES
            and (k_cache.dtype == q.dtype or k_cache.dtype in KV_DTYPES)
            and _heads_contiguous(q)
            and k_cache.is_contiguous()
        )

    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        blocks: torch.Tensor,
        lens: torch.Tensor,
        block_size: int,
        scale: float,
        out: torch.Tensor,
        window: int | None = None,
    ) -> None:
        """q, out: [b, heads, dim] (q's rows may be strided); caches: [kv_heads, slots, dim]; blocks:
        int64 [b, max_blocks]; lens: int32 [b]; window: the query (at position lens - 1) sees keys in
        (lens - 1 - window, lens - 1]; None: all. A quantized cache's rows are [dim codes, 4-byte fp32
        scale]."""
        num_seqs, num_heads, head_dim = q.shape
        num_kv_heads, num_slots, width = k_cache.shape
        max_blocks = blocks.shape[1]
        kv_dtype = KV_DTYPES.get(k_cache.dtype, 0)
        if not (
            v_cache.dtype == k_cache.dtype
            and v_cache.shape == k_cache.shape
            and width == head_dim + (SCALE_BYTES if kv_dtype else 0)
            and v_cache.is_contiguous()
            and out.is_contiguous()
            and blocks.dtype == torch.int64
            and blocks.is_contiguous()
            and lens.dtype == torch.int32
            and lens.is_contiguous()
            and out.dtype == q.dtype
            and _heads_contiguous(q)
        ):
            raise ValueError("paged_decode: unsupported tensor layout")
        rc = self._fn(
            q.data_ptr(),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            blocks.data_ptr(),
            lens.data_ptr(),
            out.data_ptr(),
            num_seqs,
            max_blocks,
            num_heads,
            num_kv_heads,
            head_dim,
            block_size,
            num_slots,
            scale,
            DTYPES[q.dtype],
            kv_dtype,
            window or 0,
            torch.get_num_threads(),
            q.stride(0),
        )
        if rc != 0:
            raise ValueError("paged_decode: rejected its arguments (lengths or head counts)")


def _heads_contiguous(q: torch.Tensor) -> bool:
    """[tokens, heads, dim] with each token's heads and dims packed (the token stride may be wider)."""
    return (
        q.dim() == 3
        and q.stride(2) == 1
        and q.stride(1) == q.shape[2]
        and q.stride(0) >= q.shape[1] * q.shape[2]
    )


@functools.cache
def load() -> CpuDecodeKernel | None:
    """The kernel, built if needed; None where it cannot be (no compiler, disabled, not glibc/ELF)."""
    if not cpu_kernels_enabled():
        return None
    try:
        return CpuDecodeKernel(ctypes.CDLL(str(build(SOURCE))))
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        log.warning("CPU decode kernel unavailable, using the torch path: %s", exc)
        return None
