"""The installed distribution's version: pyproject.toml's ``version`` is its one home."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "sortyard"


def installed_version() -> str:
    """``sortyard``'s version as installed (a wheel, or ``pip install -e .`` from a clone)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0"
