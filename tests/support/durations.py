"""The seconds each long test file takes, so that pytest-xdist's workers start the longest first.

``tests/durations.json`` maps a test file to the seconds its tests took in one ``make test``; the
suite's ``pytest_collection_modifyitems`` (``tests/conftest.py``) orders files by it, longest first,
then the files with ``slow`` tests it does not know, then the rest. The figures only order the work:
a stale file costs some balance, never a test. Make it anew from a run's JUnit XML:

    .venv/bin/python -m pytest -n 4 --dist loadfile --junitxml=/tmp/junit.xml
    .venv/bin/python -m tests.support.durations /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "tests" / "durations.json"
MIN_SECONDS = 5.0
"""Files quicker than this are left out: they fill the gaps in any order."""


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """File (relative to the repository) -> seconds; empty when there is no file."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except FileNotFoundError:
        return {}


def file_seconds(junit_xml: Path) -> dict[str, float]:
    """The seconds of each test file in a JUnit XML report (its tests' setup, call and teardown)."""
    seconds: dict[str, float] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        while parts and not parts[-1].startswith("test_"):  # drop a class name
            parts.pop()
        if parts:
            path = "/".join(parts) + ".py"
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0.0)
    return seconds


def main(argv: list[str]) -> int:
    seconds = file_seconds(Path(argv[0]))
    kept = {path: round(s) for path, s in sorted(seconds.items(), key=lambda kv: -kv[1]) if s >= MIN_SECONDS}
    DURATIONS.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    print(f"{len(kept)} files in {DURATIONS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
