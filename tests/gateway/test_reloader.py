"""Policy hot reload: file changes and SIGHUP; a bad file never replaces the serving policy."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.compiled import CompiledPolicy
from gateway.keys.hashing import hash_key
from gateway.policy import load_policy
from gateway.reloader import PolicyReloader
from tools.servers.gateway_process import GatewayProcess
from tools.servers.gateway_server import fake_policy, write_policy


def test_reload_adopts_good_files_and_refuses_bad_ones(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", fake_policy("http://127.0.0.1:1/v1"))
    reloader = PolicyReloader(path)
    seen: list[CompiledPolicy] = []
    reloader.subscribe(seen.append)
    first = reloader.policy
    path.write_text(path.read_text().replace("gpt-4o-mini", "gpt-new"))
    assert reloader.reload() and reloader.policy.pool_for_model("gpt-new") == "small"
    path.write_text("pools: [broken\n")
    assert not reloader.reload()
    assert reloader.policy.pool_for_model("gpt-new") == "small"
    assert "invalid YAML" in (reloader.last_error or "")
    assert len(seen) == 2 and seen[0].policy is first and reloader.num_refused == 1


def test_a_file_that_once_crashed_the_watcher_is_refused_and_the_next_good_one_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An alias inside itself raised RecursionError out of reload: the watcher task ended silently and
    no later edit was ever adopted. Now it is a refusal like any bad file, and so is any unexpected
    error while loading."""
    path = write_policy(tmp_path / "p.yaml", fake_policy("http://127.0.0.1:1/v1"))
    good = path.read_text()
    reloader = PolicyReloader(path)
    path.write_text(good + "x: &a [*a]\n")
    assert not reloader.reload() and "an alias refers to a value that holds it" in (reloader.last_error or "")
    path.write_text(good.replace("gpt-4o-mini", "gpt-new"))
    assert reloader.reload() and reloader.policy.pool_for_model("gpt-new") == "small"

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("gateway.reloader.load_policy", broken)
    assert not reloader.reload() and "RuntimeError: a bug" in (reloader.last_error or "")
    assert reloader.num_refused == 2


@pytest.mark.slow
def test_sighup_reloads_a_running_gateway(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", fake_policy("http://127.0.0.1:1/v1"))
    proc = GatewayProcess(path, env={"SORTYARD_RELOAD_INTERVAL_S": "3600"}).wait_ready()
    try:
        path.write_text(path.read_text().replace("gpt-4o-mini", "gpt-after-hup"))
        assert load_policy(path).pool_for_model("gpt-after-hup") == "small"
        proc.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        ids: list[str] = []
        while time.monotonic() < deadline:
            ids = [m["id"] for m in httpx.get(proc.url + "/v1/models").json()["data"]]
            if "gpt-after-hup" in ids:
                break
            time.sleep(0.1)
        assert "gpt-after-hup" in ids
    finally:
        proc.stop()


class KubeletVolume:
    """A ConfigMap or Secret volume as kubelet's AtomicWriter keeps it: the files live in a
    ``..<timestamp>`` directory, ``..data`` links to the current one, and each visible file is a
    link through it (``policy.yaml -> ..data/policy.yaml``). An update writes a new timestamped
    directory, points ``..data_tmp`` at it, renames that over ``..data`` (the one atomic step), then
    removes the old directory."""

    def __init__(self, root: Path, files: dict[str, str]) -> None:
        self.root = root
        self._serial = itertools.count()
        root.mkdir(parents=True)
        data = self._write_data_dir(files)
        os.symlink(data.name, root / "..data")
        for name in files:
            os.symlink(f"..data/{name}", root / name)

    def _write_data_dir(self, files: dict[str, str]) -> Path:
        stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
        data = self.root / f"..{stamp}.{next(self._serial):09d}"
        data.mkdir()
        for name, text in files.items():
            (data / name).write_text(text)
        return data

    def update(self, files: dict[str, str], *, same_times_as_before: bool = False) -> None:
        old = (self.root / "..data").resolve()
        new = self._write_data_dir(files)
        if same_times_as_before:  # a swap within one timestamp tick: only the file's identity differs
            for name in files:
                st = os.stat(old / name)
                os.utime(new / name, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.symlink(new.name, self.root / "..data_tmp")
        os.rename(self.root / "..data_tmp", self.root / "..data")
        shutil.rmtree(old)

    def path(self, name: str) -> Path:
        return self.root / name


def _policy_text(alias: str) -> str:
    return yaml.safe_dump(fake_policy("http://127.0.0.1:1/v1", aliases={alias: "small"}), sort_keys=False)


def _keys_text(key: str) -> str:
    return yaml.safe_dump({"keys": [{"sha256": hash_key(key), "tenant": "t"}]})


def test_a_kubelet_swap_of_a_mounted_configmap_is_adopted(tmp_path: Path) -> None:
    """Same size and same mtime: the stamp still changes (the file behind the link is a new one)."""
    volume = KubeletVolume(tmp_path / "policy", {"policy.yaml": _policy_text("model-aaaa")})
    reloader = PolicyReloader(volume.path("policy.yaml"), overlay=tmp_path / "absent.yaml")
    assert reloader.policy.pool_for_model("model-aaaa") == "small"
    before = reloader._file_stamp()
    volume.update({"policy.yaml": _policy_text("model-bbbb")}, same_times_as_before=True)
    assert reloader._file_stamp() != before
    assert reloader.reload()
    assert reloader.policy.pool_for_model("model-bbbb") == "small"
    assert reloader.policy.pool_for_model("model-aaaa") is None


async def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` (the reloader has no event to wait on) until it holds or ``timeout_s`` passes."""
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.005)


async def test_the_watcher_follows_kubelet_swaps_of_the_policy_and_the_keys(tmp_path: Path) -> None:
    policy = KubeletVolume(tmp_path / "policy", {"policy.yaml": _policy_text("model-aaaa")})
    keys = KubeletVolume(tmp_path / "keys", {"local.yaml": _keys_text("sk-first")})
    reloader = PolicyReloader(
        policy.path("policy.yaml"), overlay=keys.path("local.yaml"), poll_interval_s=0.01
    )
    reloader.start()
    try:
        policy.update({"policy.yaml": _policy_text("model-bbbb")}, same_times_as_before=True)
        await _wait_for(lambda: reloader.policy.pool_for_model("model-bbbb") == "small")
        keys.update({"local.yaml": _keys_text("sk-other")}, same_times_as_before=True)
        await _wait_for(lambda: [k.sha256 for k in reloader.policy.keys] == [hash_key("sk-other")])
        policy.update({"policy.yaml": "pools: [broken\n"})  # refused: the last good policy serves on
        await _wait_for(lambda: reloader.num_refused == 1)
        assert reloader.policy.pool_for_model("model-bbbb") == "small"
        assert reloader.num_reloads == 2
    finally:
        await reloader.stop()
