"""`make lint` keeps the house in shape: the import contracts of pyproject.toml hold for the tree, and
they fail on a new import cycle, an engine module that imports the gateway, or a module of the shared
library (sortyard) that imports either."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts, to break on purpose."""
    for package in ("gateway", "backends", "sortyard", "tools"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_new_import_cycle_breaks_the_lint(tree: Path) -> None:
    errors = tree / "gateway" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom gateway import pipeline  # noqa: E402\n")
    done = _lint(tree)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout


def test_the_engine_importing_the_gateway_breaks_the_lint(tree: Path) -> None:
    sampler = tree / "backends" / "engine" / "sampler.py"
    sampler.write_text(sampler.read_text() + "\nimport gateway.errors  # noqa: E402\n")
    done = _lint(tree)
    assert done.returncode != 0
    assert "The engine ships without the gateway BROKEN" in done.stdout


def test_the_shared_library_importing_the_gateway_breaks_the_lint(tree: Path) -> None:
    semconv = tree / "sortyard" / "telemetry" / "semconv.py"
    semconv.write_text(semconv.read_text() + "\nimport gateway.errors  # noqa: E402\n")
    done = _lint(tree)
    assert done.returncode != 0
    assert "The shared library imports neither the gateway nor the engine BROKEN" in done.stdout
