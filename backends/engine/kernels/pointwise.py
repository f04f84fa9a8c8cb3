"""Which pointwise kernels (gated activation, residual add + RMSNorm, rotary) a device gets.

The CPU gets ``pointwise.c`` (``cpu_pointwise``), a GPU Triton's (``triton/pointwise.py``); both have
one interface, ``Pointwise``. None where neither applies (no compiler, no Triton, turned off): the
layers then run their torch ops, the reference both are tested against. ``SORTYARD_TRITON_POINTWISE=0``
turns the Triton ones off.
"""

from __future__ import annotations

import functools
import os
from typing import Protocol

import torch

from backends.engine.kernels import cpu_pointwise

__all__ = ["MAX_HEAD_DIM", "MAX_HIDDEN", "Pointwise", "for_device"]

MAX_HIDDEN = cpu_pointwise.MAX_HIDDEN
"""The widest row ``rms_norm`` takes; wider norms keep their torch ops."""
MAX_HEAD_DIM = cpu_pointwise.MAX_HEAD_DIM
"""The largest head ``rotary`` takes; larger ones keep the torch path."""


class Pointwise(Protocol):
    """The pointwise kernels of one device."""

    def supports(self, *tensors: torch.Tensor) -> bool: ...

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor: ...

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> torch.Tensor: ...

    def rotary(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        num_heads: int,
        head_dim: int,
    ) -> None: ...


def for_device(device: torch.device) -> Pointwise | None:
    """The kernels for tensors on ``device``; None: use the torch ops."""
    if device.type == "cpu":
        return cpu_pointwise.load()
    if device.type == "cuda":
        return _triton()
    return None


@functools.cache
def _triton() -> Pointwise | None:
    from backends.engine.kernels import triton as triton_kernels

    if os.environ.get("SORTYARD_TRITON_POINTWISE", "1") == "0" or not triton_kernels.is_available():
        return None
    from backends.engine.kernels.triton.pointwise import TritonPointwise

    return TritonPointwise()
