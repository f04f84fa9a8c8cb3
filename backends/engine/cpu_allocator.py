"""Tune glibc malloc so the big per-step tensors reuse heap memory instead of fresh mmap pages.

By default glibc serves allocations above its mmap threshold with fresh mappings and returns them on
free, so every layer's gather and activation buffer page-faults its memory again (10x slower than the
copy itself in a VM). Raising the mmap and trim thresholds keeps freed memory in the heap for reuse,
which is what vLLM's CPU backend gets from tcmalloc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
HEAP_KEEP_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Apply the thresholds process-wide; False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, HEAP_KEEP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, HEAP_KEEP_BYTES))
    log.debug("glibc mallopt applied: %s", ok)
    return ok
