"""Which of torch's weight-only GEMM kernels a device has: the quantized layers pick their path by it.

torch registers each kernel per dispatch key, so a CPU build answers for CUDA without a GPU (it has none
of the CUDA kernels), and a CUDA build answers for the kernels its version ships.
"""

from __future__ import annotations

import torch

DEVICES = ("cpu", "cuda")
"""Devices the quantized layers run on (``weight.device.type``)."""
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def check_device(device: torch.device, method: str) -> None:
    """Refuse a device the quantized layers have no path for."""
    if device.type not in DEVICES:
        raise ValueError(f"{method} quantization runs on CPU and CUDA only, not {device.type}")


def has_kernel(op: str, device: torch.device) -> bool:
    """torch has a kernel of ``op`` (such as ``"aten::_weight_int8pack_mm"``) for ``device``'s type."""
    key = _DISPATCH_KEYS.get(device.type)
    return key is not None and bool(torch._C._dispatch_has_kernel_for_dispatch_key(op, key))
