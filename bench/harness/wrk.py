"""wrk, the load generator: one pinned run, and its result parsed from ``chat.lua``'s ``done()`` line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import WrkError
from .processes import pinned

CHAT_SCRIPT = Path(__file__).resolve().parent / "chat.lua"
RESULT_MARKER = "BENCH_WRK_RESULT "


@dataclass(frozen=True)
class WrkRun:
    """One wrk invocation against one URL."""

    url: str
    """Full URL of the chat completions endpoint."""
    num_connections: int
    """Concurrency: open connections, each with one request in flight."""
    duration_s: int
    """Length of the run (wrk takes whole seconds)."""
    model: str = "bench"
    """The request body's ``model``."""
    is_stream: bool = False
    """Send ``"stream": true`` (wrk still reads each whole response)."""
    api_key: str = ""
    """Sent as ``Authorization: Bearer <key>`` when not empty."""
    cpus: str | None = "0"
    """taskset CPU list for wrk, or None for unpinned."""
    accept_encoding: str = ""
    """Sent as ``Accept-Encoding`` when not empty (wrk does not decode: it counts the bytes sent)."""
    timeout_s: int = 10
    """wrk's per-request timeout; a request slower than this counts as a socket error."""
    temperature: str | None = None
    """The body's ``temperature`` when set (``"0"``: a cacheable request, the cache-hit path)."""
    is_unique: bool = False
    """Every body different (a counter in the prompt): with ``temperature`` 0, every request a
    response-cache miss."""
    api: str = "chat"
    """``messages``: the same request in Anthropic's Messages format (``url`` is then ``/v1/messages``)."""


@dataclass(frozen=True)
class WrkResult:
    """What one wrk run measured."""

    num_requests: int
    duration_s: float
    requests_per_s: float
    mean_ms: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    num_bytes: int
    errors: dict[str, int]
    """wrk's counters: connect, read, write, timeout (socket errors) and status (HTTP >= 400)."""

    @property
    def num_errors(self) -> int:
        return sum(self.errors.values())


def parse_wrk_output(text: str) -> WrkResult:
    """The result from wrk's stdout, which must hold the ``done()`` line of ``chat.lua``."""
    for line in text.splitlines():
        if line.startswith(RESULT_MARKER):
            raw = json.loads(line[len(RESULT_MARKER) :])
            break
    else:
        raise WrkError(f"wrk printed no {RESULT_MARKER.strip()} line; output:\n{text[-2000:]}")
    duration_s = raw["duration_us"] / 1e6
    latency = {k: v / 1000.0 for k, v in raw["latency_us"].items()}
    return WrkResult(
        num_requests=raw["requests"],
        duration_s=duration_s,
        requests_per_s=raw["requests"] / duration_s if duration_s > 0 else 0.0,
        mean_ms=latency["mean"],
        p50_ms=latency["p50"],
        p75_ms=latency["p75"],
        p90_ms=latency["p90"],
        p99_ms=latency["p99"],
        max_ms=latency["max"],
        num_bytes=raw["bytes"],
        errors={k: int(v) for k, v in raw["errors"].items()},
    )


def wrk_version(binary: str = "wrk") -> str:
    out = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else "unknown"


def find_wrk() -> str | None:
    return shutil.which("wrk")


def run_wrk(run: WrkRun, *, binary: str = "wrk", allow_errors: bool = False) -> WrkResult:
    """Run wrk once; raises WrkError on any non-2xx answer or socket error unless ``allow_errors``."""
    argv = [
        binary,
        "-t1",
        f"-c{run.num_connections}",
        f"-d{run.duration_s}s",
        f"--timeout={run.timeout_s}s",
        "--latency",
        "-s",
        str(CHAT_SCRIPT),
        run.url,
    ]
    env = {
        **os.environ,
        "BENCH_MODEL": run.model,
        "BENCH_STREAM": "1" if run.is_stream else "0",
        "BENCH_API_KEY": run.api_key,
        "BENCH_ACCEPT_ENCODING": run.accept_encoding,
    }
    if run.temperature is not None:
        env["BENCH_TEMPERATURE"] = run.temperature
    if run.is_unique:
        env["BENCH_UNIQUE"] = "1"
    if run.api != "chat":
        env["BENCH_API"] = run.api
    proc = subprocess.run(
        pinned(argv, run.cpus),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=run.duration_s + run.timeout_s + 30,
    )
    if proc.returncode != 0:
        raise WrkError(
            f"wrk exited {proc.returncode} on {run.url}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    result = parse_wrk_output(proc.stdout)
    if result.num_requests == 0:
        raise WrkError(f"wrk completed no request on {run.url}:\n{proc.stdout[-2000:]}")
    if result.num_errors and not allow_errors:
        raise WrkError(
            f"wrk counted errors on {run.url} at c={run.num_connections} "
            f"(stream={run.is_stream}): {result.errors} of {result.num_requests} requests:\n"
            f"{proc.stdout[-2000:]}"
        )
    return result
