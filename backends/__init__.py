"""Inference backends: the reference engine (``backends.engine``) and its OpenAI server.

torch's OpenMP workers (libgomp) spin for a long while after each parallel region by default; on a
small machine they hold the cores that the engine's own native kernels (decode attention, the fused
pointwise ops) run their threads on between two GEMMs, and decode attention took twice as long. Not
spinning at all (``OMP_WAIT_POLICY=PASSIVE``) cures that but puts a wake-up before every GEMM. A short
spin, ``GOMP_SPINCOUNT=10000`` (microseconds, not milliseconds), keeps the workers warm across the
back-to-back GEMMs of a layer and lets them sleep through a kernel: the best of the settings measured
(docs/engine.md). libgomp reads these when torch is first imported, so they are set here, before any
engine module imports torch; either variable already in the environment wins.
"""

import os

if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "10000"
