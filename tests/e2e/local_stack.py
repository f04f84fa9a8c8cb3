"""``make run``'s stack for an end-to-end test module: ``sortyard run`` (the reference engine with
SmolLM2 and Gemma 3 270M, the gateway in front) on free loopback ports, with the default policy; and
more gateways beside it (``sortyard run --no-engine`` in the same directory: the same policy, key and
files, in front of the same engine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0
POLICY = "default.yaml"


@dataclass(frozen=True)
class LocalStack:
    """What ``make run`` prints: the gateway's OpenAI base URL and the development key."""

    base_url: str
    api_key: str
    workdir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    """What the test added to the environment (a Redis URL): every gateway of the stack gets it."""


@contextmanager
def local_stack(
    workdir: Path, env: Mapping[str, str] | None = None, changes: Mapping[str, Any] | None = None
) -> Iterator[LocalStack]:
    """Start ``sortyard run`` in ``workdir`` (the default policy with ``changes``' top-level sections
    put in) and wait for its two ``export`` lines; stop it after."""
    document = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())
    text = yaml.safe_dump({**document, **(changes or {})})
    (workdir / POLICY).write_text(text.replace("127.0.0.1:8100", f"127.0.0.1:{free_port()}"))
    with _gateway(workdir, POLICY, dict(env or {}), ()) as stack:
        yield stack


@contextmanager
def extra_gateway(stack: LocalStack, changes: Mapping[str, Any] | None = None) -> Iterator[LocalStack]:
    """Another gateway in front of ``stack``'s engine, with its policy (and ``changes``), key, files and
    environment; stopped (SIGTERM, gracefully) when the block ends."""
    document = yaml.safe_load((stack.workdir / POLICY).read_text())
    port = free_port()
    name = f"gateway-{port}.yaml"  # beside the stack's: the same overlay (local.yaml) and its key
    (stack.workdir / name).write_text(yaml.safe_dump({**document, **(changes or {})}))
    with _gateway(stack.workdir, name, dict(stack.env), ("--no-engine",), port) as extra:
        yield extra


@contextmanager
def _gateway(
    workdir: Path, policy: str, env: dict[str, str], extra: tuple[str, ...], port: int | None = None
) -> Iterator[LocalStack]:
    port = port or free_port()
    command = [sys.executable, "-m", "gateway", "run", "--policy", policy, "--port", str(port), *extra]
    proc = subprocess.Popen(
        command,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
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
        yield LocalStack(exports["OPENAI_BASE_URL"], exports["OPENAI_API_KEY"], workdir, env)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
