"""Kernel builds: cached per source, flags, compiler and CPU, installed atomically."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backends.engine.kernels import build, cpu_decode, cpu_pointwise


@pytest.mark.parametrize("source", [cpu_decode.SOURCE, cpu_pointwise.SOURCE])
def test_build_is_cached_per_source_and_compiler(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    first = build.build(source)
    assert first.parent == tmp_path / "kernels" and first.exists() and first.name.startswith(source.stem)
    mtime = first.stat().st_mtime_ns
    assert build.build(source) == first and first.stat().st_mtime_ns == mtime  # not rebuilt
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temp files left behind
