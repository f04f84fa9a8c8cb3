"""Redis as fleets run it, on loopback, for tests: a primary with a replica watched by three
sentinels, or a three-primary cluster. Every process is ours (free ports, temporary dirs), killed
and removed on ``stop``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.servers.redis_server import free_port


def redis_cli(port: int, *args: str, timeout_s: float = 10.0) -> str:
    """``redis-cli -p port args...``: its stdout, stripped (raises on a non-zero exit)."""
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    return done.stdout.strip()


def wait_until(condition: Callable[[], bool], *, what: str, timeout_s: float = 30.0) -> None:
    """Poll ``condition`` (errors count as "not yet") until it holds; the deadline only catches a hang."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (subprocess.SubprocessError, OSError, ValueError):  # not yet (an exit early passes through)
            pass
        time.sleep(0.05)
    raise TimeoutError(f"gave up waiting for {what}")


class _ExitedEarly(Exception):
    """The process exited while we waited for it to answer."""


class Process:
    """One redis-server process on a free loopback port, from a config file in its own dir."""

    def __init__(
        self, root: Path, name: str, config: str, *, sentinel: bool = False, cluster_bus: bool = False
    ) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.config = self.dir / "redis.conf"
        self.extra = config
        self.sentinel = sentinel
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster_bus = cluster_bus
        self._pick_ports()
        self._write_config()

    def _pick_ports(self) -> None:
        # a cluster node's bus port is port + 10000 unless named, which fails for any port above 55535
        # (a fifth of the ephemeral range) or where that port is taken: so it gets a free one of its own
        self.port = free_port()
        self.bus_port = free_port() if self.cluster_bus else None

    def _write_config(self) -> None:
        base = f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
        if self.bus_port is not None:
            base += f"cluster-port {self.bus_port}\n"
        base += "save ''\nappendonly no\nprotected-mode no\n"
        self.config.write_text(base + self.extra)

    def start(self) -> None:
        """Start it; when it exits at once (its port taken meanwhile by another process), on a new port
        (only before anything else was told this port: replicas and sentinels are configured after)."""
        self._write_config()
        for _ in range(3):
            args = ["redis-server", str(self.config)] + (["--sentinel"] if self.sentinel else [])
            with (self.dir / "log").open("ab") as log:
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_until(self._answers, what=f"redis on port {self.port}")
                return
            except _ExitedEarly:
                self._pick_ports()
                self._write_config()
        raise RuntimeError(f"redis-server would not start: see {self.dir / 'log'}")

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise _ExitedEarly(f"redis-server exited with {self.proc.returncode}")
        return redis_cli(self.port, "PING") == "PONG"

    def kill(self) -> None:
        """SIGKILL: no shutdown, no goodbye to its peers."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


class SentinelFleet:
    """A primary, one replica, three sentinels (quorum 2) monitoring ``service``, with short timers."""

    def __init__(
        self, *, service: str = "mymaster", down_after_ms: int = 400, failover_timeout_ms: int = 2000
    ):
        self.root = Path(tempfile.mkdtemp(prefix="sy-sentinel-"))
        self.service = service
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.primary = Process(self.root, "primary", "")
        self.replica = Process(self.root, "replica", "")  # configured once the primary's port is sure
        self.sentinels = [Process(self.root, f"sentinel{i}", "", sentinel=True) for i in range(3)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def primary_port(self) -> int:
        """The primary's port as the first live sentinel sees it."""
        for sentinel in self.sentinels:
            if sentinel.proc is not None:
                reply = redis_cli(sentinel.port, "SENTINEL", "get-master-addr-by-name", self.service)
                return int(reply.split()[1])
        raise RuntimeError("no sentinel runs")

    def start(self) -> None:
        self.primary.start()
        self.replica.extra = f"replicaof 127.0.0.1 {self.primary.port}\n"
        self.replica.start()
        wait_until(
            lambda: "master_link_status:up" in redis_cli(self.replica.port, "INFO", "replication"),
            what="the replica to sync",
        )
        for sentinel in self.sentinels:
            sentinel.extra = (
                f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {self.service} 1\n"
            )
            sentinel.start()

        def every_sentinel_knows_all() -> bool:  # else a failover cannot reach its quorum
            for s in self.sentinels:
                replicas = redis_cli(s.port, "SENTINEL", "replicas", self.service)
                peers = redis_cli(s.port, "SENTINEL", "sentinels", self.service)
                if str(self.replica.port) not in replicas or peers.count("runid") < 2:
                    return False
            return True

        wait_until(every_sentinel_knows_all, what="the sentinels to find the replica and each other")

    def stop(self) -> None:
        for process in (*self.sentinels, self.primary, self.replica):
            process.kill()
        shutil.rmtree(self.root, ignore_errors=True)


class Cluster:
    """Three primaries (``--cluster-enabled yes``), slots spread by ``redis-cli --cluster create``."""

    def __init__(self, *, num_primaries: int = 3) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sy-cluster-"))
        config = "cluster-enabled yes\ncluster-node-timeout 2000\ncluster-config-file nodes.conf\n"
        self.nodes = [Process(self.root, f"node{i}", config, cluster_bus=True) for i in range(num_primaries)]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:2])

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        wait_until(
            lambda: all("cluster_state:ok" in redis_cli(n.port, "CLUSTER", "INFO") for n in self.nodes),
            what="the cluster to be ok",
        )

    def node_id(self, port: int) -> str:
        return redis_cli(port, "CLUSTER", "MYID")

    def owner_port(self, slot: int) -> int:
        """The port of the primary serving ``slot`` (as the first node sees the map)."""
        for line in redis_cli(self.nodes[0].port, "CLUSTER", "NODES").splitlines():
            fields = line.split()  # id ip:port@cport flags master ping pong epoch link slot-ranges...
            for part in fields[8:]:
                if part.startswith("["):
                    continue  # a slot being imported or migrated
                start, _, end = part.partition("-")
                if int(start) <= slot <= int(end or start):
                    return int(fields[1].split("@")[0].rsplit(":", 1)[1])
        raise ValueError(f"slot {slot} is served by no node")

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        shutil.rmtree(self.root, ignore_errors=True)
