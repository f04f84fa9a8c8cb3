"""Child processes pinned to CPUs with ``taskset``, their health checks, RSS and CPU time."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import StartError

_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the driver dies, even by SIGKILL (Linux prctl)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the child binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(argv: Sequence[str], cpus: str | None) -> list[str]:
    """``argv`` prefixed with ``taskset -c CPUS`` (taskset execs, so the pid stays the program's)."""
    if not cpus:
        return list(argv)
    taskset = shutil.which("taskset")
    if taskset is None:
        raise StartError("taskset not found (util-linux); pass --no-pin to run unpinned")
    return [taskset, "-c", cpus, *argv]


@dataclass(frozen=True)
class ProcessSpec:
    """How to start one process of the benchmark."""

    label: str
    """Name used in messages and in the log file name."""
    argv: tuple[str, ...]
    """The command, without the taskset prefix."""
    cpus: str | None
    """taskset CPU list (``"1"``, ``"0-1"``), or None to leave the process unpinned."""
    log_dir: Path
    """Where ``<label>.log`` collects the process's stdout and stderr."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment on top of the driver's own."""
    cwd: Path | None = None
    """Working directory (the repository root for ``python -m gateway``)."""


class ManagedProcess:
    """A started child in its own session, so stopping it also stops the workers it forked."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.log_path = spec.log_dir / f"{spec.label}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise StartError(f"{self.spec.label} is not started")
        return self._proc.pid

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.spec.env}
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                pinned(self.spec.argv, self.spec.cpus),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.spec.cwd,
                start_new_session=True,
                # A killed driver (a test timeout) must not leave servers behind.
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    def log_tail(self, num_chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-num_chars:]
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise StartError(
                f"{self.spec.label} exited with status {self._proc.returncode}; log tail:\n{self.log_tail()}"
            )

    def wait_healthy(self, url: str, timeout_s: float) -> float:
        """Poll ``url`` until it answers 200; returns the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise StartError(
            f"{self.spec.label} not healthy at {url} after {timeout_s:.0f} s; log tail:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        # The child leads its own process group (start_new_session): signal that group only.
        _signal_group(proc.pid, signal.SIGTERM)
        _signal_group(proc.pid, signal.SIGCONT)  # a paused group takes the SIGTERM once it runs again
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout_s)

    def pause(self) -> None:
        """SIGSTOP the whole process group: no CPU, no timer wakeups, sockets kept, until ``resume``."""
        _signal_group(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        _signal_group(self.pid, signal.SIGCONT)

    def tree_pids(self) -> list[int]:
        return process_tree(self.pid)

    def rss_mib(self) -> float:
        """Resident memory of the process and all its descendants, in MiB."""
        return sum(_rss_kib(pid) for pid in self.tree_pids()) / 1024.0

    def cpu_s(self) -> float:
        """User + system CPU seconds used so far by the process and its live descendants."""
        return tree_cpu_s(self.pid)


def tree_cpu_s(root_pid: int) -> float:
    """User + system CPU seconds used so far by ``root_pid`` and its live descendants."""
    return sum(_cpu_s(pid) for pid in process_tree(root_pid))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the ``(comm)`` field, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_tree(root_pid: int) -> list[int]:
    """``root_pid`` and every descendant, found by scanning /proc for parent ids."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # utime and stime are stat fields 14 and 15, i.e. 11 and 12 after (comm).
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S
