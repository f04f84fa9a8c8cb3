"""``make run``'s stack for an end-to-end test module: ``sortyard run`` (the reference engine with
SmolLM2 and Gemma 3 270M, the gateway in front) on free loopback ports, with the default policy."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class LocalStack:
    """What ``make run`` prints: the gateway's OpenAI base URL and the development key."""

    base_url: str
    api_key: str
    workdir: Path


@contextmanager
def local_stack(workdir: Path) -> Iterator[LocalStack]:
    """Start ``sortyard run`` in ``workdir`` and wait for its two ``export`` lines; stop it after."""
    engine_port, gateway_port = free_port(), free_port()
    document = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())
    policy = workdir / "default.yaml"
    policy.write_text(yaml.safe_dump(document).replace("127.0.0.1:8100", f"127.0.0.1:{engine_port}"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "run", "--policy", str(policy), "--port", str(gateway_port)],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        exports: dict[str, str] = {}
        while time.monotonic() < deadline and len(exports) < 2:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("export OPENAI_"):
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exports[name] = value
        assert len(exports) == 2, "".join(lines[-30:])
        yield LocalStack(exports["OPENAI_BASE_URL"], exports["OPENAI_API_KEY"], workdir)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
