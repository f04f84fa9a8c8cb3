"""Triton's interpreter for every test here: it must be on before ``triton`` is first imported (its
``@triton.jit`` picks the interpreter when the kernels' modules load), so this runs at collection."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
