"""Rotary position embeddings (the Hugging Face "rotate half" layout) and their scaling variants."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from backends.engine.kernels import pointwise


def compute_inv_freq(
    head_dim: int, base: float, scaling: dict[str, Any] | None
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and the cos/sin scale (yarn's attention factor), as transformers computes them."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type == "default":
        return inv_freq, 1.0
    assert scaling is not None
    factor = float(scaling["factor"])
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    if rope_type == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, smoothed, scaled), 1.0
    if rope_type == "yarn":
        return _yarn(head_dim, base, factor, scaling)
    raise ValueError(f"unsupported rope_type {rope_type!r} (supported: default, linear, llama3, yarn)")


def _yarn(dim: int, base: float, factor: float, scaling: dict[str, Any]) -> tuple[torch.Tensor, float]:
    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1
    orig = scaling["original_max_position_embeddings"]

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


class RotaryEmbedding(nn.Module):
    """Applies RoPE to flat [num_tokens, num_heads, head_dim] q and k at given positions."""

    def __init__(self, head_dim: int, max_position: int, base: float, scaling: dict[str, Any] | None) -> None:
        super().__init__()
        inv_freq, attention_scaling = compute_inv_freq(head_dim, base, scaling)
        positions = torch.arange(max_position, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", emb.cos() * attention_scaling, persistent=False)
        self.register_buffer("sin", emb.sin() * attention_scaling, persistent=False)

        self._cached: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._checked: torch.Tensor | None = None
        """The last positions tensor found within the table (each layer of a step passes the same)."""

    def rotate_in_place(self, positions: torch.Tensor, x: torch.Tensor, num_heads: int) -> bool:
        """Rotates the first ``num_heads`` heads of each row of x ([tokens, row]: a fused q|k|v output,
        q's heads then k's) in place with the device's kernel, one pass; False (x untouched) where the kernel
        does not apply, and ``forward`` is the way."""
        kernel = pointwise.for_device(x.device)
        if (
            kernel is None
            or self.cos.shape[-1] > pointwise.MAX_HEAD_DIM
            or x.dim() != 2
            or positions.dtype != torch.long
            or not kernel.supports(x, self.cos, self.sin)
            or not positions.is_contiguous()
        ):
            return False
        if self._checked is not positions:  # the kernel indexes the table without bounds checks
            if positions.numel() and not 0 <= int(positions.min()) <= int(positions.max()) < len(self.cos):
                raise IndexError(f"a position outside the rotary table of {len(self.cos)}")
            self._checked = positions
        kernel.rotary(x, positions, self.cos, self.sin, num_heads, self.cos.shape[-1])
        return True

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self._cos_sin(positions, q.dtype)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # every layer of a step passes the same positions tensor: gather its rows once
        if self._cached is None or self._cached[0] is not positions:
            cos = self.cos[positions].unsqueeze(1).to(dtype)
            sin = self.sin[positions].unsqueeze(1).to(dtype)
            self._cached = (positions, cos, sin)
        return self._cached[1], self._cached[2]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)
