"""``python -m gateway ARGS`` as a terminal runs it: the helper the ``serve`` and ``run`` tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def start_until_banner(args: list[str], cwd: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """``python -m gateway ARGS`` as a user's terminal runs it, and its lines up to the banner's key line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SORTYARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    assert proc.stdout is not None
    while not (lines and lines[-1].startswith("export OPENAI_API_KEY=")):
        line = proc.stdout.readline()
        if not line:  # it exited before the banner
            proc.wait(30)
            raise AssertionError("".join(lines))
        lines.append(line)
    return proc, lines
