"""Builds a kernel's C file with the host compiler once per machine, for ctypes to load.

Nothing here needs torch's C++ toolchain: a plain C file, ``cc -O3 -march=native``, cached under
``$SORTYARD_CACHE_DIR`` (default ``~/.cache/sortyard``) by a hash of the source, flags, compiler
and CPU, so a new machine or a changed source builds afresh and concurrent builders each install a
whole file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fno-trapping-math",
    "-freciprocal-math",
    "-fPIC",
    "-shared",
    "-pthread",
)
"""Reassociation lets reductions vectorise; no -ffast-math, whose crtfastmath would flip the whole
process's denormal mode at load time."""
OPENMP = ("-fopenmp",)
"""The kernels split their work with OpenMP, and the library links ``libgomp.so.1``: loaded after torch
(the engine imports torch first), that name resolves to the libgomp torch already loaded, so the
kernels run on torch's own worker threads instead of starting threads that compete with them."""
BUILD_TIMEOUT_S = 120


def build(source: Path) -> Path:
    """The shared library of ``source``, compiled now unless this machine has it cached; raises
    RuntimeError (no compiler, or it failed) or subprocess errors."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc or gcc) on PATH")
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    parts = (source.read_text(), " ".join(FLAGS + OPENMP), version, platform.machine(), _cpu_model())
    key = hashlib.sha256(b"\0".join(part.encode() for part in parts)).hexdigest()[:16]
    target = cache_dir() / f"{source.stem}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        for extra in (OPENMP, ()):  # without OpenMP (a compiler lacking it), the kernels start pthreads
            result = subprocess.run(
                [compiler, *FLAGS, *extra, str(source), "-o", tmp, "-lm"],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
            )
            if result.returncode == 0:
                break
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:500]}")
        os.replace(tmp, target)  # atomic: concurrent builders each install a whole file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("built the CPU kernel %s: %s", source.name, target)
    return target


def cache_dir() -> Path:
    root = os.environ.get("SORTYARD_CACHE_DIR")
    if root:
        return Path(root) / "kernels"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "sortyard" / "kernels"


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    first = {line.split(":")[0].strip(): line for line in reversed(lines)}
    return first.get("model name", "") + first.get("flags", "")
