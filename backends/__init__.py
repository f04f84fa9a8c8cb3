"""Inference backends: the reference engine (``backends.engine``) and its OpenAI server.

torch's OpenMP workers spin after each parallel region by default (libgomp's active wait); on a small
machine they hold the cores that the engine's own native kernels (decode attention, the fused pointwise
ops) run on between two GEMMs, and decode attention took twice as long. libgomp reads its settings when
torch is first imported, so a passive wait is asked for here, before any engine module imports torch;
an OMP_WAIT_POLICY already set wins.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
