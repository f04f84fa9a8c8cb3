"""Gated MLP activations on a merged gate/up projection: SwiGLU (Llama family) and GeGLU (Gemma)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backends.engine.kernels import pointwise


class SiluAndMul(nn.Module):
    """SiLU(gate) * up in one pass (``kernels/pointwise.py``: C on the CPU, Triton on a GPU): torch's two
    ops read and write the prefill's megabyte-sized gate|up three times."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = pointwise.for_device(x.device)
        if kernel is not None and kernel.supports(x):
            return kernel.silu_and_mul(x)
        return self.reference(x)

    @staticmethod
    def reference(x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


class GeluTanhAndMul(nn.Module):
    """GELU with the tanh approximation, torch's kernel, as transformers' ``gelu_pytorch_tanh``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.gelu(gate, approximate="tanh") * up


def gated_activation(name: str) -> nn.Module:
    """The module for a ``ModelConfig.hidden_act``."""
    if name == "silu":
        return SiluAndMul()
    if name == "gelu_pytorch_tanh":
        return GeluTanhAndMul()
    raise ValueError(f"unsupported activation {name!r}")
