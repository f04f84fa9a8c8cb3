"""Every Python file of the project stays under 400 lines: a module that grows past it holds more than one
noun, and is split along its seam (docs/architecture.md lists what each module holds)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def test_no_python_file_is_over_400_lines() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    too_long = {}
    for name in listed:
        path = ROOT / name
        if path.is_file():
            num_lines = len(path.read_bytes().splitlines())
            if num_lines > MAX_LINES:
                too_long[name] = num_lines
    assert listed and not too_long, f"split these along their seams: {too_long}"
