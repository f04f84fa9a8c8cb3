"""Kernel builds: cached per source, flags, compiler and CPU, installed atomically; OpenMP when the
compiler has it, pthreads when not."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from backends.engine.kernels import build, cpu_decode, cpu_pointwise
from backends.engine.layers.activation import SiluAndMul


@pytest.mark.parametrize("source", [cpu_decode.SOURCE, cpu_pointwise.SOURCE])
def test_build_is_cached_per_source_and_compiler(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SORTYARD_CACHE_DIR", str(tmp_path))
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    first = build.build(source)
    assert first.parent == tmp_path / "kernels" and first.exists() and first.name.startswith(source.stem)
    mtime = first.stat().st_mtime_ns
    assert build.build(source) == first and first.stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temp files left behind


def test_without_openmp_the_kernels_start_their_own_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler that refuses -fopenmp still builds them; their rows are split over pthreads."""
    monkeypatch.setenv("SORTYARD_CACHE_DIR", str(tmp_path))
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(build, "OPENMP", ("-fno-such-option-anywhere",))
    kernels = cpu_pointwise.CpuPointwise(ctypes.CDLL(str(build.build(cpu_pointwise.SOURCE))))
    x = torch.randn(4096, 2 * 256, generator=torch.Generator().manual_seed(0))  # enough rows for threads

    torch.testing.assert_close(kernels.silu_and_mul(x), SiluAndMul.reference(x), rtol=1e-5, atol=1e-5)
