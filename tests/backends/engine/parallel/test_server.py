"""``python -m backends.server --tensor-parallel-size 2`` on a tiny model: answers a chat completion through
the openai SDK, and stops with a non-zero exit when its worker rank is killed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.backends.serving.harness import free_port

ROOT = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.slow


def test_two_rank_server_answers_and_exits_when_a_rank_dies(
    tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    port = free_port()
    log_path = tmp_path / "server.log"
    command = [sys.executable, "-m", "backends.server", "--model", f"tiny={tiny_dirs['gqa']}",
               "--port", str(port), "--tensor-parallel-size", "2", "--embedding-model", "none",
               "--kv-cache-bytes", str(2 << 20), "--num-threads", "1", "--max-model-len", "256"]  # fmt: skip
    with log_path.open("w") as log:
        server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _is_ready(url):
            assert server.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "never ready:\n" + log_path.read_text()
            time.sleep(0.2)
        with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
            reply = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0
            )
        assert reply.usage is not None and reply.usage.completion_tokens == 8
        found = re.search(r"rank 1 started: pid (\d+)", log_path.read_text())
        assert found, log_path.read_text()
        os.kill(int(found.group(1)), signal.SIGKILL)
        assert server.wait(timeout=60) != 0  # noticed between requests too, and never a hang
        assert re.search(r"rank 1 \(pid \d+\) died \(signal SIGKILL\)", log_path.read_text())
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)


def _is_ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False
