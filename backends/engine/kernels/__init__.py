"""Native kernels the engine builds on first use; each has a pure-torch reference it is tested against."""

from __future__ import annotations

import os


def cpu_kernels_enabled() -> bool:
    """``SWITCHYARD_CPU_KERNELS=0`` turns off every CPU-specific path: the native decode kernel and
    the oneDNN weight prepacking."""
    return os.environ.get("SWITCHYARD_CPU_KERNELS", "1") != "0"
