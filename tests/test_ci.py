""".ci/run and the package metadata: what CI on a clean clone does first, and a build setuptools
does not warn about."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"


def _commands() -> list[str]:
    """The lines of ``.ci/run`` that run something: comments and blank lines dropped."""
    lines = (line.strip() for line in CI.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_ci_stops_at_the_first_failure() -> None:
    assert "set -euo pipefail" in _commands()


def test_ci_runs_the_linters_before_the_suite() -> None:
    """The linters take a minute and the suite several: a style slip fails fast."""
    commands = _commands()
    assert "make lint" in commands and "make test" in commands
    assert commands.index("make lint") < commands.index("make test")


def test_the_prometheus_install_updates_the_lists_first_and_is_bounded() -> None:
    """A fresh machine has no package lists: ``apt-get install`` alone fails there at once."""
    script = CI.read_text(encoding="utf-8")
    bounded = re.search(r"timeout (\d+) sh -c\s*\\?\s*'([^']*)'", script)
    assert bounded is not None, "the apt-get step must run under timeout"
    assert 0 < int(bounded.group(1)) <= 300
    step = bounded.group(2)
    assert "apt-get update" in step and "apt-get install" in step
    assert step.index("apt-get update") < step.index("apt-get install")
    assert "prometheus" in step
    assert script.index("timeout") < script.index("make lint")  # before the linters and the suite


def test_setuptools_reads_the_project_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """``project.license`` as a table makes setuptools warn on every install; an SPDX string does not."""
    monkeypatch.chdir(ROOT)  # the readme and package paths are relative to the project
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    messages = [f"{w.category.__name__}: {w.message}" for w in caught]
    assert not [m for m in messages if "setuptools" in m.lower() or "license" in m.lower()], messages
    assert dist.metadata.name == "sortyard"


def test_ci_installs_chromium_and_requires_the_browser_test() -> None:
    """The console's browser test skips where Chromium is missing; CI installs it first and, with
    ``SORTYARD_REQUIRE_BROWSER``, fails rather than skips when it could not."""
    commands = _commands()
    assert "make browser" in commands and "export SORTYARD_REQUIRE_BROWSER=1" in commands
    assert commands.index("make browser") < commands.index("make test")
    assert commands.index("export SORTYARD_REQUIRE_BROWSER=1") < commands.index("make test")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.partition("\nbrowser:\n")[2].partition("\n\n")[0]
    assert "timeout 300" in recipe and "apt-get update" in recipe and "install -y" in recipe
    assert recipe.index("apt-get update") < recipe.index("apt-get install")
    assert "--no-install-recommends chromium" in recipe


def test_the_console_files_ship_in_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gateway/console/static/`` is read with importlib.resources: the package data must include it."""
    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert "gateway.console.static" in (dist.packages or [])  # a namespace package: the globs apply there
    patterns = dist.package_data.get("") or dist.package_data["*"]
    shipped = {path.name for path in (ROOT / "gateway" / "console" / "static").iterdir()}
    assert shipped and all(any(Path(name).match(p) for p in patterns) for name in shipped)
