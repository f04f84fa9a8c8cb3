"""A real browser for tests: Playwright for Python driving Debian's Chromium.

Playwright's own browser download needs the internet, so it is never used: the tests launch the
system's ``chromium`` (``apt-get install chromium``; ``make browser`` does it as root) through
``executable_path``. Where Playwright or Chromium is missing, the browser tests skip and say which;
with ``SORTYARD_REQUIRE_BROWSER=1`` (``.ci/run`` sets it) they fail instead, so CI never passes
without having run them. ``SORTYARD_CHROMIUM`` names another binary.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser", "/usr/lib/chromium/chromium")
ARTIFACTS = Path(
    os.environ.get("SORTYARD_ARTIFACTS_DIR") or Path(__file__).resolve().parents[1] / "artifacts"
)
"""Where browser tests keep their screenshots (``tests/artifacts/``, git-ignored)."""


def chromium_executable() -> str | None:
    """The Chromium binary to drive: ``$SORTYARD_CHROMIUM``, else the first of ``CANDIDATES`` found."""
    given = os.environ.get("SORTYARD_CHROMIUM")
    if given:
        return given if Path(given).exists() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("SORTYARD_REQUIRE_BROWSER"):
        pytest.fail(f"SORTYARD_REQUIRE_BROWSER is set, but {reason}")
    pytest.skip(reason)


def chromium() -> Iterator[Any]:
    """Yield a launched headless Chromium (a ``playwright.sync_api.Browser``); skip when there is none."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    executable = chromium_executable()
    if executable is None:
        _unavailable(
            "no Chromium found (apt-get install chromium, or `make browser` as root); "
            "Playwright's own browser download is not used"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield browser
        finally:
            browser.close()
