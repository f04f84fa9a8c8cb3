"""INT8 weights (``--quantization int8``): per-output-channel symmetric int8, scales from the float weight.

A GGUF's Q8_0 blocks are not handed over: their scales are per 32 input columns, the kernel's per output row,
so mapping them means requantizing every block to its row's scale, a second rounding that gives the same
int8 values as quantizing the dequantized weight; the layer takes the float weight instead.

The CPU kernel is torch's weight-only ``aten._weight_int8pack_mm(x, w_int8 [N, K], scales [N])``, run with
bfloat16 activations and scales (with fp32 ones it takes a path about 5x slower). At SmolLM2-135M's shapes
on an AVX-512 Zen 4 VM, with weights too big for the cache as in decode, it beat the fp32 oneDNN GEMM 3.5x
at one row, tied at 16 rows, and lost 1.4-1.5x at 64-512 rows (prefill). fbgemm's dynamic int8 linear was
faster at every size, but its per-tensor activation quantization raised SmolLM2's perplexity by half.

On CUDA the same op exists in recent torch builds, as a plain kernel (one thread per output, fp32 math);
it runs batches of up to ``CUDA_KERNEL_MAX_ROWS`` rows (decode), and bigger ones (prefill), or a build
without it, dequantize the weight to the activations' dtype and take the dense GEMM (cuBLAS). No GPU
figure decides that threshold yet: ``bench/gpu/run.py`` times both paths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends.engine.layers.weight_kernels import check_device, has_kernel

KERNEL_OP = "aten::_weight_int8pack_mm"
CUDA_KERNEL_MAX_ROWS = 8
"""On CUDA, the most rows the kernel runs; a bigger batch dequantizes and takes the dense GEMM."""


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [N, K], fp32 scales [N]) with ``weight ~= q * scales[:, None]``, symmetric per output row."""
    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


class Int8Weight:
    """One linear layer's int8 weight [out, in] with bf16 row scales, and its bias."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, *, use_kernel: bool | None = None
    ) -> None:
        """``use_kernel``: None takes torch's kernel where the device has it; False always dequantizes."""
        check_device(weight.device, "int8")
        q, scales = quantize_int8(weight)
        self.qweight = q.contiguous()
        self.scales = scales.to(torch.bfloat16)
        self.bias = bias
        self.has_kernel = has_kernel(KERNEL_OP, weight.device) if use_kernel is None else use_kernel
        self.max_kernel_rows = CUDA_KERNEL_MAX_ROWS if weight.device.type == "cuda" else None
        """None: the kernel takes every batch (the CPU's)."""

    @property
    def num_weight_bytes(self) -> int:
        """Bytes of the int8 weight and its scales."""
        return self.qweight.numel() + self.scales.numel() * self.scales.element_size()

    def dequantized(self) -> torch.Tensor:
        """W as [out, in] fp32 (int8 times its row scale)."""
        return self.qweight.float() * self.scales.float()[:, None]

    def uses_kernel(self, num_rows: int) -> bool:
        """torch's int8 kernel computes a batch of ``num_rows``; else the dequantized dense GEMM."""
        return self.has_kernel and (self.max_kernel_rows is None or num_rows <= self.max_kernel_rows)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x W^T + b in x's dtype (the kernel's product computed from bf16 activations)."""
        flat = x.reshape(-1, x.shape[-1])
        if self.uses_kernel(flat.shape[0]):
            y = torch.ops.aten._weight_int8pack_mm(flat.to(torch.bfloat16), self.qweight, self.scales)
            y = y.to(x.dtype)
        else:  # the weight in x's dtype for one dense GEMM
            y = F.linear(flat, self.qweight.to(x.dtype) * self.scales.to(x.dtype)[:, None])
        y = y.reshape(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias.to(y.dtype)
