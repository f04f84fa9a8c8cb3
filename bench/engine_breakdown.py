"""Where the engine's time goes: wall seconds spent in each kind of work during an in-process run.

``timing()`` wraps, for the duration of a ``with`` block, the calls that do the engine's work: the GEMMs
(``MergedLinear.forward``, the LM head included), decode attention (the native kernel), prefill attention
(``scaled_dot_product_attention``), the fused pointwise kernels, and the whole forward pass
(``ModelRunner.run``); what the pass spends outside those is the rest of the model (embedding, KV
writes, copies, Python), and what a step spends outside the pass is scheduling and sampling. Each
wrapper adds a clock read or two per call, a few percent of a run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from backends.engine import model_runner
from backends.engine.kernels import cpu_decode, cpu_pointwise
from backends.engine.layers import attention, linear

TIMED: list[tuple[Any, str, str]] = [
    (model_runner.ModelRunner, "run", "forward pass"),
    (linear.MergedLinear, "forward", "GEMMs"),
    (cpu_decode.CpuDecodeKernel, "__call__", "decode attention"),
    (attention.F, "scaled_dot_product_attention", "prefill attention"),
    (cpu_pointwise.CpuPointwise, "silu_and_mul", "pointwise"),
    (cpu_pointwise.CpuPointwise, "rms_norm", "pointwise"),
    (cpu_pointwise.CpuPointwise, "rotary", "pointwise"),
]


@contextmanager
def timing() -> Iterator[defaultdict[str, float]]:
    """Seconds by kind of work while the block runs (the counter fills as it goes)."""
    seconds: defaultdict[str, float] = defaultdict(float)
    with ExitStack() as stack:
        for owner, name, label in TIMED:
            original = getattr(owner, name)
            setattr(owner, name, _timed(original, label, seconds))
            stack.callback(setattr, owner, name, original)
        yield seconds


def _timed(fn: Callable[..., Any], label: str, seconds: defaultdict[str, float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - start

    return wrapper
