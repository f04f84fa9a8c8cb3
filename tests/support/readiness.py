"""Waiting for a server process to answer: the condition itself, with a deadline, never a guess."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_until_ok(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Return once ``url`` answers 200; AssertionError if ``proc`` exits first (with its stderr, when
    piped) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"exited {proc.returncode} before {url} answered: {stderr[-3000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered 200 within {timeout_s:g} s")
