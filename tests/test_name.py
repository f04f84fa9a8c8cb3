"""The project's name is Sortyard everywhere: the old one survives only in one "formerly" line.

Every file in the tree is read (tracked or not, binary too), except what tools make: the venv, caches,
build output. The old name is spelled from parts here so that this file does not hold it.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = ("switch" + "yard").encode()
SKIPPED_DIRS = {".git", ".venv", "build", "dist", ".local", ".cache", "node_modules", "artifacts"}
SKIPPED_SUFFIXES = ("_cache", ".egg-info")


def _files() -> list[Path]:
    found: list[Path] = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(SKIPPED_SUFFIXES)]
        found.extend(Path(folder) / name for name in names if not name.endswith(".pyc"))
    return found


def test_the_old_name_is_left_only_in_one_formerly_line() -> None:
    hits = []
    for path in _files():
        if OLD in path.name.lower().encode():
            hits.append(f"{path.relative_to(ROOT)} (its name)")
        if path.is_symlink():
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if OLD in line.lower():
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.decode(errors='replace').strip()}")
    formerly = [hit for hit in hits if "formerly" in hit.lower()]
    assert len(formerly) == 1, formerly
    assert [hit for hit in hits if hit not in formerly] == []
