"""Every test here runs against real servers (a gateway, a fake upstream, Redis): marked ``integration``
so ``pytest -m integration`` (or ``-m "not integration"``) selects them. They run in ``make test``."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
