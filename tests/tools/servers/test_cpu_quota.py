import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.servers import cpu_quota
from tools.servers.cpu_quota import CpuQuota, CpuQuotaRoot, cpu_quota_root


def v1_mount(tmp_path: Path) -> Path:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return tmp_path


def v2_mount(tmp_path: Path) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    return tmp_path


def test_a_v1_hierarchy_gets_the_quota_in_microseconds_a_period(tmp_path: Path) -> None:
    root = cpu_quota_root(v1_mount(tmp_path))
    assert root == CpuQuotaRoot(tmp_path / "cpu", 1)

    quota = CpuQuota("engine-0", 0.45, root=root)
    quota.add(1234)

    assert (tmp_path / "cpu" / "engine-0" / "cpu.cfs_period_us").read_text() == "100000"
    assert (tmp_path / "cpu" / "engine-0" / "cpu.cfs_quota_us").read_text() == "45000"
    assert (tmp_path / "cpu" / "engine-0" / "cgroup.procs").read_text() == "1234"


def test_a_v2_hierarchy_turns_the_cpu_controller_on_and_writes_cpu_max(tmp_path: Path) -> None:
    root = cpu_quota_root(v2_mount(tmp_path))
    assert root == CpuQuotaRoot(tmp_path, 2)

    CpuQuota("engine-0", 2, root=root)

    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (tmp_path / "engine-0" / "cpu.max").read_text() == "200000 100000"


def test_a_machine_without_a_cpu_controller_has_no_root_and_a_quota_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")  # v2 without cpu delegated
    assert cpu_quota_root(tmp_path) is None

    monkeypatch.setattr(cpu_quota, "cpu_quota_root", lambda: None)
    with pytest.raises(PermissionError, match="cgroup CPU controller"):
        CpuQuota("engine-0", 0.5)


def test_a_quota_of_no_cpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="above 0"):
        CpuQuota("engine-0", 0, root=cpu_quota_root(v1_mount(tmp_path)))


@pytest.mark.skipif(cpu_quota_root() is None, reason="no writable cgroup CPU controller here")
def test_a_busy_process_in_the_group_is_throttled_and_close_removes_the_group() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with CpuQuota(f"sortyard-test-{os.getpid()}", 0.05) as quota:
            quota.add(spinner.pid)
            assert quota.pids() == [spinner.pid]
            deadline = time.monotonic() + 60
            while quota.throttled_periods() == 0:  # the condition, not a guess: it spins until throttled
                assert time.monotonic() < deadline, "a spinning process never met its quota"
                time.sleep(0.05)
        assert not quota.path.exists()
        assert spinner.poll() is None  # moved back to the root, still running
    finally:
        spinner.kill()
        spinner.wait()
