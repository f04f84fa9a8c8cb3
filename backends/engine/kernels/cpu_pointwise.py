"""Calls ``pointwise.c`` through ctypes: the decoder's gated activation, residual add + RMSNorm and
rotary embeddings, each one pass over its rows on the CPU (built once per machine by ``kernels/build.py``).

The layers ask ``load()`` for the kernels and ``supports()`` for each call; where no compiler works, or
``SORTYARD_CPU_KERNELS=0``, or the tensors are not contiguous fp32/bf16 on the CPU, they run their
torch ops, which are the reference the kernels are tested against.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import subprocess
from pathlib import Path

import torch

from backends.engine.kernels import cpu_kernels_enabled
from backends.engine.kernels.build import build

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("pointwise.c")
DTYPES = {torch.float32: 0, torch.bfloat16: 1}
MAX_HIDDEN = 8192
"""The widest row ``rms_norm`` takes; wider norms keep their torch ops."""
MAX_HEAD_DIM = 512
"""The largest head ``rotary`` takes; larger ones keep the torch path."""

_p, _i64, _int, _f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float


class CpuPointwise:
    def __init__(self, library: ctypes.CDLL) -> None:
        self._silu_and_mul = library.silu_and_mul
        self._silu_and_mul.argtypes = [_p, _p, _i64, _i64, _int, _int]
        self._rms_norm = library.rms_norm
        self._rms_norm.argtypes = [_p, _p, _p, _p, _i64, _i64, _f32, _int, _int]
        self._rotary = library.rotary
        self._rotary.argtypes = [_p, _p, _p, _p, _i64, _i64, _i64, _i64, _int, _int]
        for fn in (self._silu_and_mul, self._rms_norm, self._rotary):
            fn.restype = ctypes.c_int

    @staticmethod
    def supports(*tensors: torch.Tensor) -> bool:
        """Every tensor on the CPU, contiguous, and of one dtype the kernels take (fp32, bf16)."""
        dtype = tensors[0].dtype
        return dtype in DTYPES and all(
            t.device.type == "cpu" and t.dtype == dtype and t.is_contiguous() for t in tensors
        )

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """SiLU(gate) * up for x = [..., 2 * inner] (gate | up): [..., inner]."""
        inner = x.shape[-1] // 2
        out = torch.empty((*x.shape[:-1], inner), dtype=x.dtype)
        rows = x.numel() // (2 * inner) if inner else 0
        rc = self._silu_and_mul(x.data_ptr(), out.data_ptr(), rows, inner, DTYPES[x.dtype], _threads())
        _check(rc, "silu_and_mul")
        return out

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Llama's RMSNorm of x times weight; with ``residual``, of residual + x, which is written back
        into ``residual`` first (the decoder's running sum)."""
        hidden = x.shape[-1]
        out = torch.empty_like(x)
        res_ptr = None if residual is None else residual.data_ptr()
        rc = self._rms_norm(
            x.data_ptr(), res_ptr, weight.data_ptr(), out.data_ptr(), x.numel() // hidden, hidden,
            eps, DTYPES[x.dtype], _threads(),
        )  # fmt: skip
        _check(rc, "rms_norm")
        return out

    def rotary(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        num_heads: int,
        head_dim: int,
    ) -> None:
        """Rotates, in place, the first ``num_heads`` heads of each row of x ([tokens, row], such as a
        fused q|k|v output) at ``positions`` (int64); cos, sin: [max_position, head_dim] in x's dtype."""
        rc = self._rotary(
            x.data_ptr(), positions.data_ptr(), cos.data_ptr(), sin.data_ptr(), x.shape[0], x.shape[1],
            num_heads, head_dim, DTYPES[x.dtype], _threads(),
        )  # fmt: skip
        _check(rc, "rotary")


def _threads() -> int:
    return torch.get_num_threads()


def _check(rc: int, name: str) -> None:
    if rc != 0:
        raise ValueError(f"{name}: rejected its arguments (sizes)")


@functools.cache
def load() -> CpuPointwise | None:
    """The kernels, built if needed; None where they cannot be (no compiler, disabled)."""
    if not cpu_kernels_enabled():
        return None
    try:
        return CpuPointwise(ctypes.CDLL(str(build(SOURCE))))
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        log.warning("CPU pointwise kernels unavailable, using torch ops: %s", exc)
        return None
