"""The reference engine as a real process (``python -m backends.server``), publishing its KV-cache
events unless told not to, for the KV-aware routing test and the benchmarks that need a real engine.

Each engine binds its PUB and replay sockets on fixed loopback ports chosen at construction, so a
restart (``stop`` then ``start``) comes back where the gateway's SUB sockets already point, as an
engine restarted by its supervisor does. ``kv_source`` is the policy's event source for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]


class EngineProcess:
    """One engine serving ``model`` (a source ``python -m backends.server --model`` takes) as ``name``."""

    def __init__(
        self,
        model: str,
        *,
        name: str,
        log_path: Path,
        tokenizer_dir: Path | None = None,
        extra_args: tuple[str, ...] = (),
        num_threads: int = 1,
        kv_events: bool = True,
    ) -> None:
        self.model = model
        self.name = name
        self.log_path = log_path
        self.tokenizer_dir = tokenizer_dir
        self.extra_args = extra_args
        self.num_threads = num_threads
        self.kv_events = kv_events
        self.port, self.events_port, self.replay_port = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def kv_source(self) -> dict[str, Any]:
        """The policy's ``kv_routing.pools.<pool>.replicas.<label>`` entry for this engine."""
        return {
            "endpoint": f"tcp://127.0.0.1:{self.events_port}",
            "replay_endpoint": f"tcp://127.0.0.1:{self.replay_port}",
            "topic": "kv",
        }

    def command(self) -> list[str]:
        events = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{self.events_port}",  # a `*`: the engine binds, the gateway connects
            "replay_endpoint": f"tcp://*:{self.replay_port}",
            "topic": "kv",
        }
        command = [sys.executable, "-m", "backends.server", "--model", f"{self.name}={self.model}",
                   "--port", str(self.port), "--num-threads", str(self.num_threads),
                   "--embedding-model", "none", "--log-level", "warning", *self.extra_args]  # fmt: skip
        if self.kv_events:
            command += ["--kv-events-config", json.dumps(events)]
        if self.tokenizer_dir is not None:
            command += ["--export-tokenizer", str(self.tokenizer_dir)]
        return command

    def start(self) -> EngineProcess:
        """Start the process (``wait_ready`` waits for it)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                env={**os.environ, "SORTYARD_ACCESS_LOG": "0", "OTEL_TRACES_EXPORTER": "none"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout_s: float = 180.0) -> EngineProcess:
        """Return once ``/ready`` answers 200 (and the tokenizer is exported, when asked for)."""
        assert self.proc is not None, "not started"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine {self.name} exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        log = self.log_path.read_text()[-3000:]
        raise RuntimeError(f"engine {self.name} not ready in {timeout_s:g} s: {log}")

    def metrics(self) -> dict[str, float]:
        """The engine's counters and gauges, summed over labels: ``{"vllm:prefix_cache_hits": ...}``."""
        totals: dict[str, float] = {}
        for line in httpx.get(self.url + "/metrics", timeout=5).text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            base = name.partition("{")[0]
            if base.endswith("_created"):
                continue
            base = base.removesuffix("_total")
            totals[base] = totals.get(base, 0.0) + float(value)
        return totals

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s; the ports are free again once it returns."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL: the engine dies without a goodbye, as a crash does."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
