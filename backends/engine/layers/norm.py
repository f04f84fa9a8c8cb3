"""RMSNorm, computed in fp32 like Hugging Face's; one pass per row with the residual add before it fused
in (``kernels/pointwise.py``: ``pointwise.c`` on the CPU, Triton on a GPU)."""

from __future__ import annotations

import torch
from torch import nn

from backends.engine.kernels import pointwise


class RMSNorm(nn.Module):
    """Llama's: normalised in fp32, cast to the model's dtype, then times the weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = self._kernel()
        if kernel is not None and kernel.supports(x, self.weight):
            return kernel.rms_norm(x, self.weight, self.eps)
        return self.reference(x)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's residual step: ``residual += x`` in place (in the model's dtype, as
        ``h = h + x`` rounds it), then the norm of that sum; returns (normed, residual)."""
        kernel = self._kernel()
        if kernel is not None and kernel.supports(x, residual, self.weight):
            return kernel.rms_norm(x, self.weight, self.eps, residual), residual
        residual.add_(x)
        return self.reference(residual), residual

    def _kernel(self) -> pointwise.Pointwise | None:
        """The fused kernel of the weight's device, where it takes rows this wide."""
        return pointwise.for_device(self.weight.device) if len(self.weight) <= pointwise.MAX_HIDDEN else None

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The torch ops, as transformers' LlamaRMSNorm; what the kernel is tested against."""
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: the weight is stored zero-centred and applied as (1 + weight), and the product
    is taken in fp32 before the cast back (Llama casts first), as transformers' Gemma3RMSNorm."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)
