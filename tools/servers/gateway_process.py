"""Gateway replicas as real processes (``python -m gateway serve``), for multi-replica tests and the
drain benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]


class GatewayProcess:
    def __init__(self, policy_path: Path, env: dict[str, str] | None = None, workers: int = 1) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--policy",
                str(policy_path),
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--workers",
                str(workers),
            ],
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 60) -> GatewayProcess:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gateway exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}"
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("gateway did not become ready")

    def terminate(self) -> None:
        """SIGTERM, as Kubernetes sends it; the process drains (see ``wait_exit``)."""
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout_s: float) -> int:
        """The exit status, once the process has ended (``subprocess.TimeoutExpired`` past ``timeout_s``)."""
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
