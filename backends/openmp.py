"""The OpenMP runtime the engine's CPU threads run on: Intel's (``libiomp5``) when it is installed.

torch's CPU wheel and the engine's C kernels make their parallel regions through GNU's libgomp. Intel's
runtime (the ``intel-openmp`` wheel, an ``engine`` dependency on x86-64 Linux) serves the same calls
through its ``GOMP_*`` entry points, and keeps its worker threads spinning for a while (``KMP_BLOCKTIME``,
200 ms) between regions, where libgomp soon puts them to sleep. A decode step is hundreds of small
regions (every GEMM, attention and pointwise kernel of every layer), so waking sleeping workers costs
more than the work on these CPUs; the 64-request benchmark ran 1.3x faster through the server with it
(docs/benchmarks.md, "The OpenMP runtime"). vLLM's CPU build asks its users to preload it by hand.

A runtime has to be loaded before any library that uses one, so the server and the benchmark start
themselves again at once, before torch is imported, with ``LD_PRELOAD`` naming it
(:func:`relaunch_with_intel_openmp`); the process keeps its PID. ``SORTYARD_OPENMP=gnu`` keeps libgomp.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

__all__ = [
    "OPENMP_ENV",
    "intel_openmp_library",
    "loaded_runtime",
    "preload_env",
    "relaunch_with_intel_openmp",
]

log = logging.getLogger(__name__)

OPENMP_ENV = "SORTYARD_OPENMP"
"""``intel`` (the default: Intel's runtime when installed) or ``gnu`` (libgomp, as torch ships)."""

_LIBRARY = "libiomp5.so"


def intel_openmp_library() -> Path | None:
    """Where the ``intel-openmp`` wheel put ``libiomp5.so`` (``<prefix>/lib``), or None."""
    candidate = Path(sys.prefix, "lib", _LIBRARY)
    if candidate.is_file():
        return candidate
    try:
        files = metadata.files("intel-openmp") or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == _LIBRARY:
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    return None


def preload_env(environ: Mapping[str, str], library: Path | None) -> dict[str, str] | None:
    """The environment to start again with so that ``library`` is preloaded; None when there is no need
    (asked for ``gnu``, no library, or already preloaded)."""
    choice = environ.get(OPENMP_ENV, "intel").strip().lower()
    if choice not in ("intel", "gnu"):
        raise SystemExit(f"{OPENMP_ENV}={environ[OPENMP_ENV]!r}: expected 'intel' or 'gnu'")
    if choice == "gnu" or library is None:
        return None
    preloaded = environ.get("LD_PRELOAD", "").replace(":", " ").split()
    if any(Path(entry).name == _LIBRARY for entry in preloaded):
        return None
    return {**environ, "LD_PRELOAD": " ".join([str(library), *preloaded])}


def relaunch_with_intel_openmp() -> None:
    """Start this process again (``os.execve``, same PID and arguments) with Intel's runtime preloaded,
    when it is installed and not loaded yet. Call first thing in a ``__main__``, before torch."""
    if not sys.platform.startswith("linux"):
        return
    env = preload_env(os.environ, intel_openmp_library())
    if env is None:
        return
    if "torch" in sys.modules:  # too late: a runtime is loaded already
        log.warning("torch is imported already; the engine keeps GNU OpenMP")
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def loaded_runtime() -> str:
    """``intel`` when this process has Intel's runtime mapped, else ``gnu`` (Linux; elsewhere ``gnu``)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "gnu"
    return "intel" if _LIBRARY in maps else "gnu"


def default_num_threads(environ: Mapping[str, str] | None = None) -> int:
    """CPU threads for torch when none were asked for: ``OMP_NUM_THREADS`` when it is set (the
    standard knob: several engines sharing a machine, a test worker among others), else every core
    this process may run on."""
    env = os.environ if environ is None else environ
    raw = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return len(os.sched_getaffinity(0))
