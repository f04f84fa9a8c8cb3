"""Triton kernels for the GPU path: paged decode (split-K), prefill over cached context, KV-cache writes.

``backend.TritonPagedAttention`` drives them with the cache layout of ``TorchPagedAttention``
([num_kv_heads, num_slots, row], slot = block_id * block_size + offset; int8/fp8 rows as
``layers/kv_quant.py`` packs them), so the model runner and the KV sizing are the same on either backend.
Without a GPU, Triton's interpreter (``TRITON_INTERPRET=1`` set before ``import triton``) runs the same
kernels on CPU tensors: that is how the tests check them against the torch reference.
"""

from __future__ import annotations

import importlib.util
import os

import torch


def is_available() -> bool:
    """Triton is importable, and there is a CUDA device to compile for or its interpreter is on."""
    if importlib.util.find_spec("triton") is None:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
