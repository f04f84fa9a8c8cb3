"""A fixed CPU share for a process, by a Linux cgroup's CPU quota: what a benchmark gives each engine
replica so that replicas behave as they do on their own GPUs, where one replica's idle time is not lent
to another.

Without it, engines sharing a machine's cores borrow each other's idle time: a replica left idle
makes the busy ones faster, and a router that spreads load buys no latency by it. With a quota of
``cpus`` (0.5: half a core, whatever the machine is doing), a replica holding twice the requests of
another runs them on the same share, as a GPU would.

The quota is written where the machine keeps its CPU controller: cgroup v1's ``cpu`` hierarchy
(``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``) or cgroup v2's unified one (``cpu.max``). Both need
the right to make a group (root, or a delegated subtree); :func:`cpu_quota_root` says whether this
machine grants it, so a benchmark can refuse the option with a clear message rather than run
unthrottled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["CpuQuota", "CpuQuotaRoot", "cpu_quota_root"]

PERIOD_US = 100_000
"""The accounting period: the group runs at most ``cpus * PERIOD_US`` microseconds in each."""

CGROUP_MOUNT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class CpuQuotaRoot:
    """Where groups are made: the controller's directory and which cgroup version it is."""

    path: Path
    version: Literal[1, 2]


def cpu_quota_root(mount: Path = CGROUP_MOUNT) -> CpuQuotaRoot | None:
    """The writable CPU controller under ``mount``, or None where this process may not make groups."""
    v1 = mount / "cpu"
    if (v1 / "cpu.cfs_quota_us").is_file() and os.access(v1, os.W_OK):
        return CpuQuotaRoot(v1, 1)
    controllers = mount / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split() and os.access(mount, os.W_OK):
        return CpuQuotaRoot(mount, 2)
    return None


class CpuQuota:
    """One group of processes that together run on at most ``cpus`` cores.

    ``add`` moves a running process (all its threads, and the children it starts later) into the
    group; ``close`` moves whatever is left back to the root and removes the group.
    """

    def __init__(self, name: str, cpus: float, *, root: CpuQuotaRoot | None = None) -> None:
        if cpus <= 0:
            raise ValueError(f"cpus must be above 0, not {cpus}")
        root = root or cpu_quota_root()
        if root is None:
            raise PermissionError(
                "no writable cgroup CPU controller under /sys/fs/cgroup: a CPU quota needs root or a "
                "delegated cgroup subtree"
            )
        self.root = root
        self.cpus = cpus
        self.path = root.path / name
        quota_us = max(1000, round(cpus * PERIOD_US))  # the kernel's floor is 1 ms a period
        if root.version == 2:
            self._enable_cpu_controller()
        self.path.mkdir(exist_ok=True)
        if root.version == 1:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            (self.path / "cpu.max").write_text(f"{quota_us} {PERIOD_US}")

    def _enable_cpu_controller(self) -> None:
        subtree = self.root.path / "cgroup.subtree_control"
        if "cpu" not in subtree.read_text().split():
            subtree.write_text("+cpu")

    def add(self, pid: int) -> None:
        """Move process ``pid`` (every thread of it) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]

    def throttled_periods(self) -> int:
        """Periods in which the group used up its quota and waited: above 0 once the quota bit."""
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "nr_throttled":
                return int(value)
        return 0

    def close(self) -> None:
        """Move any process still in the group back to the root, then remove the group."""
        if not self.path.exists():
            return
        for pid in self.pids():
            try:
                (self.root.path / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:  # it exited meanwhile
                pass
        self.path.rmdir()

    def __enter__(self) -> CpuQuota:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
