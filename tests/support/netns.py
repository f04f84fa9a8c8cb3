"""Linux network namespaces as hosts on one private /24, for many-host tests (root only).

``Network(["redis", "gw1", ...])`` makes a namespace per host (``sy-<pid>-<host>``) plus one holding a
bridge (``sy-<pid>-net``); each host gets a veth into the bridge with an address on a /24 no route of
this machine touches (``10.213.x.0/24``), and loopback up. The test process itself joins the bridge
through one more veth (``.1``), so it reaches every host's address directly. Processes run inside a host
with ``ip netns exec``. ``cut(host, peer)`` drops everything between two hosts with iptables rules in
``host``'s namespace only, so ``host`` still reaches everyone else (a one-sided partition, as when a
firewall or a broken route separates a gateway from Redis); ``heal`` removes them.

``destroy()`` (or leaving the ``with`` block) stops the processes started here and deletes every
namespace and link, whatever state the test left them in.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

IP = shutil.which("ip") or "/usr/sbin/ip"
IPTABLES = shutil.which("iptables") or "/usr/sbin/iptables"
_MAX_IFNAME = 15  # Linux interface names


def unavailable_reason(*, partitions: bool = True) -> str | None:
    """Why namespaces cannot be used here (a skip reason), or None when they can; ``partitions``: the
    test also cuts links (``Network.cut``: iptables in a namespace)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not Path(IP).exists():
        return "no `ip` (iproute2)"
    if not partitions:
        return None
    if not Path(IPTABLES).exists():
        return "no iptables"
    probe = f"sy-{os.getpid()}-probe"
    made = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        rules = subprocess.run(
            [IP, "netns", "exec", probe, IPTABLES, "-w", "-S"], capture_output=True, text=True
        )
        if rules.returncode != 0:
            return f"iptables does not work in a namespace: {rules.stderr.strip()}"
    finally:
        subprocess.run([IP, "netns", "del", probe], capture_output=True)
    return None


def _sh(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def free_subnet(first: int) -> ipaddress.IPv4Network:
    """A ``10.213.x.0/24`` that no route of this (root) namespace overlaps, trying ``x = first`` on."""
    routes = json.loads(_sh(IP, "-j", "-4", "route", "show", "table", "all") or "[]")
    taken = [
        ipaddress.ip_network(route["dst"], strict=False)
        for route in routes
        if route.get("dst", "default") not in ("default", "")
    ]
    for step in range(254):
        candidate = ipaddress.IPv4Network(f"10.213.{(first + step) % 254 + 1}.0/24")
        if not any(candidate.overlaps(network) for network in taken):
            return candidate
    raise RuntimeError("every 10.213.x.0/24 is routed here already")


@dataclass(frozen=True)
class Host:
    """One host of a ``Network``: its namespace and its address on the bridge."""

    name: str
    netns: str
    address: str


class Network:
    """Hosts (network namespaces) on one bridge; see the module docstring.

    Args:
        names: the hosts, in address order (``.2`` on).
        prefix: the start of every namespace's name (default ``sy-<pid>``).
    """

    def __init__(self, names: Sequence[str], *, prefix: str | None = None) -> None:
        for name in names:
            if len(f"v-{name}") > _MAX_IFNAME:
                raise ValueError(f"host name {name!r} is too long for an interface name")
        self.prefix = prefix or f"sy-{os.getpid()}"
        self.bridge_netns = f"{self.prefix}-net"
        self.root_link = f"sy{os.getpid()}h"[:_MAX_IFNAME]
        """The test process's own veth into the bridge (in the root namespace)."""
        self.subnet = free_subnet(os.getpid() % 254)
        addresses = self.subnet.hosts()
        self.root_address = str(next(addresses))
        self.hosts = {name: Host(name, f"{self.prefix}-{name}", str(next(addresses))) for name in names}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._cuts: set[tuple[str, str]] = set()

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.destroy()

    def address(self, name: str) -> str:
        return self.hosts[name].address

    # ---- set-up and tear-down ---------------------------------------------------------------------

    def create(self) -> Network:
        """Make the namespaces, the bridge and the links (a failure part-way tears down what was made)."""
        try:
            _sh(IP, "netns", "add", self.bridge_netns)
            _sh(IP, "-n", self.bridge_netns, "link", "add", "br0", "type", "bridge")
            _sh(IP, "-n", self.bridge_netns, "link", "set", "br0", "up")
            for host in self.hosts.values():
                _sh(IP, "netns", "add", host.netns)
                # both ends made in the bridge's namespace, one moved into the host: no name in the root
                # namespace, so hosts of concurrent runs never clash
                _sh(
                    IP, "-n", self.bridge_netns, "link", "add", f"v-{host.name}", "type", "veth",
                    "peer", "name", "eth0", "netns", host.netns,
                )  # fmt: skip
                self._attach(f"v-{host.name}")
                _sh(IP, "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
                _sh(IP, "-n", host.netns, "link", "set", "eth0", "up")
                _sh(IP, "-n", host.netns, "link", "set", "lo", "up")
            _sh(
                IP, "link", "add", self.root_link, "type", "veth",
                "peer", "name", "v-root", "netns", self.bridge_netns,
            )  # fmt: skip
            self._attach("v-root")
            _sh(IP, "addr", "add", f"{self.root_address}/24", "dev", self.root_link)
            _sh(IP, "link", "set", self.root_link, "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def _attach(self, link: str) -> None:
        _sh(IP, "-n", self.bridge_netns, "link", "set", link, "master", "br0")
        _sh(IP, "-n", self.bridge_netns, "link", "set", link, "up")

    def destroy(self) -> None:
        """Stop the processes started here, then delete the namespaces and links (never raises)."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._procs.clear()
        for netns in [host.netns for host in self.hosts.values()] + [self.bridge_netns]:
            subprocess.run([IP, "netns", "del", netns], capture_output=True)
        # gone with its peer's namespace already, unless that namespace was never made
        subprocess.run([IP, "link", "del", self.root_link], capture_output=True)
        self._cuts.clear()

    # ---- processes --------------------------------------------------------------------------------

    def popen(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdout: int | IO[Any] | None = subprocess.DEVNULL,
        stderr: int | IO[Any] | None = subprocess.DEVNULL,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside host ``name`` (``ip netns exec`` execs it: the Popen is the process);
        ``destroy`` stops it."""
        proc = subprocess.Popen(
            [IP, "netns", "exec", self.hosts[name].netns, *argv],
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        self._procs.append(proc)
        return proc

    def run(self, name: str, argv: Sequence[str]) -> str:
        """Run ``argv`` inside host ``name`` to its end; its stdout (RuntimeError when it fails)."""
        return _sh(IP, "netns", "exec", self.hosts[name].netns, *argv)

    # ---- partitions -------------------------------------------------------------------------------

    def cut(self, name: str, peer: str) -> None:
        """Drop every packet between ``name`` and ``peer``, by rules in ``name``'s namespace (TCP
        connections stay open and stall, as across a real partition; nothing is refused)."""
        if (name, peer) in self._cuts:
            return
        for rule in self._rules(peer):
            self.run(name, [IPTABLES, "-w", "-I", *rule])
        self._cuts.add((name, peer))

    def heal(self, name: str, peer: str) -> None:
        """Remove what ``cut(name, peer)`` added."""
        if (name, peer) not in self._cuts:
            return
        for rule in self._rules(peer):
            self.run(name, [IPTABLES, "-w", "-D", *rule])
        self._cuts.discard((name, peer))

    def _rules(self, peer: str) -> list[list[str]]:
        address = self.hosts[peer].address
        return [["OUTPUT", "-d", address, "-j", "DROP"], ["INPUT", "-s", address, "-j", "DROP"]]
