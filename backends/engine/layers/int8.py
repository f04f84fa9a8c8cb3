"""INT8 weights (``--quantization int8``): per-output-channel symmetric int8, scales from the float weight.

A GGUF's Q8_0 blocks are not handed over: their scales are per 32 input columns, the kernel's per output row,
so mapping them means requantizing every block to its row's scale, a second rounding that gives the same
int8 values as quantizing the dequantized weight; the layer takes the float weight instead.

The CPU kernel is torch's weight-only ``aten._weight_int8pack_mm(x, w_int8 [N, K], scales [N])``, run with
bfloat16 activations and scales (with fp32 ones it takes a path about 5x slower). At SmolLM2-135M's shapes
on an AVX-512 Zen 4 VM, with weights too big for the cache as in decode, it beat the fp32 oneDNN GEMM 3.5x
at one row, tied at 16 rows, and lost 1.4-1.5x at 64-512 rows (prefill). fbgemm's dynamic int8 linear was
faster at every size, but its per-tensor activation quantization raised SmolLM2's perplexity by half.
"""

from __future__ import annotations

import torch


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [N, K], fp32 scales [N]) with ``weight ~= q * scales[:, None]``, symmetric per output row."""
    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


class Int8Weight:
    """One linear layer's int8 weight [out, in] with bf16 row scales, and its bias."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        if weight.device.type != "cpu":
            raise ValueError("int8 quantization runs on CPU only")
        q, scales = quantize_int8(weight)
        self.qweight = q.contiguous()
        self.scales = scales.to(torch.bfloat16)
        self.bias = bias

    @property
    def num_weight_bytes(self) -> int:
        """Bytes of the int8 weight and its scales."""
        return self.qweight.numel() + self.scales.numel() * self.scales.element_size()

    def dequantized(self) -> torch.Tensor:
        """W as [out, in] fp32 (int8 times its row scale)."""
        return self.qweight.float() * self.scales.float()[:, None]

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x W^T + b in x's dtype (the product computed from bf16 activations)."""
        flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        y = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scales)
        y = y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias.to(y.dtype)
