"""backends/openmp.py: when the server starts itself again on Intel's OpenMP runtime, and that it does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends.openmp import OPENMP_ENV, default_num_threads, intel_openmp_library, preload_env

ROOT = Path(__file__).resolve().parents[2]
LIB = Path("/venv/lib/libiomp5.so")


def test_preloads_intel_openmp_by_default() -> None:
    env = preload_env({"PATH": "/bin"}, LIB)
    assert env == {"PATH": "/bin", "LD_PRELOAD": str(LIB)}


def test_keeps_what_was_preloaded_after_it() -> None:
    env = preload_env({"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4"}, LIB)
    assert env is not None and env["LD_PRELOAD"] == f"{LIB} /usr/lib/libtcmalloc_minimal.so.4"


@pytest.mark.parametrize(
    ("environ", "library"),
    [
        ({OPENMP_ENV: "gnu"}, LIB),  # asked for torch's own libgomp
        ({OPENMP_ENV: " GNU "}, LIB),
        ({}, None),  # not installed (another platform, or the engine extra without it)
        ({"LD_PRELOAD": "/elsewhere/libiomp5.so"}, LIB),  # preloaded already: no loop of restarts
        ({"LD_PRELOAD": f"/lib/x.so:{LIB}"}, LIB),
    ],
)
def test_no_restart_needed(environ: dict[str, str], library: Path | None) -> None:
    assert preload_env(environ, library) is None


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(SystemExit, match="SORTYARD_OPENMP='llvm'"):
        preload_env({OPENMP_ENV: "llvm"}, LIB)


SCRIPT = """
import os, sys
from backends.openmp import loaded_runtime, relaunch_with_intel_openmp
relaunch_with_intel_openmp()
import torch
a = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) / 4096
expected = sum(float(a[0, k]) * float(a[k, 1]) for k in range(64))
assert abs(float((a @ a)[0, 1]) - expected) < 1e-4
print(os.getpid(), loaded_runtime(), torch.get_num_threads())
"""


@pytest.mark.skipif(intel_openmp_library() is None, reason="intel-openmp is not installed here")
@pytest.mark.parametrize(("choice", "runtime"), [("intel", "intel"), ("gnu", "gnu")])
def test_a_process_starts_itself_again_on_the_runtime(choice: str, runtime: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {OPENMP_ENV: choice}
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = (text.decode() for text in process.communicate(timeout=120))
    assert process.returncode == 0, err
    pid, loaded, _threads = out.split()
    assert loaded == runtime
    assert err == ""  # no warning from either runtime
    assert int(pid) == process.pid  # started again in place: a supervisor's PID stays right


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"OMP_NUM_THREADS": "3"}, 3),
        ({"OMP_NUM_THREADS": "2,1"}, 2),
        ({"OMP_NUM_THREADS": "0"}, None),
        ({}, None),
    ],
)
def test_threads_follow_omp_num_threads_else_the_usable_cores(
    environ: dict[str, str], expected: int | None
) -> None:
    assert default_num_threads(environ) == (expected or len(os.sched_getaffinity(0)))
