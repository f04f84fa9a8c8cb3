"""gateway/drain_mark.py: an admin drain that reaches one worker fails every worker's readiness, and
any worker undoes it; two Gateways sharing one mark file stand for two workers, and a real
``sortyard serve --workers 2`` checks the wiring."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from gateway.drain_mark import DrainMark
from gateway.instance import Gateway
from gateway.keys.hashing import hash_key, new_key
from gateway.settings import Settings
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_process import GatewayProcess
from tools.servers.gateway_server import fake_policy, write_policy

ADMIN = new_key()


def test_a_mark_without_a_path_does_nothing(tmp_path: Path) -> None:
    mark = DrainMark(None)
    mark.set()
    assert not mark.is_set()
    mark.clear()
    shared = DrainMark(str(tmp_path / "drain"))
    shared.set()
    shared.set()
    assert shared.is_set()
    shared.clear()
    shared.clear()  # already gone: fine
    assert not shared.is_set()


def _workers(tmp_path: Path, drain_file: str | None) -> tuple[Gateway, Gateway]:
    path = write_policy(tmp_path / "policy.yaml", fake_policy("http://127.0.0.1:9/v1"))
    settings = Settings(policy_path=str(path), drain_file=drain_file)
    return create_app(settings).gateway, create_app(settings).gateway


def test_an_admin_drain_is_every_workers_and_any_worker_undoes_it(tmp_path: Path) -> None:
    first, second = _workers(tmp_path, str(tmp_path / "drain"))
    first.start_draining("admin")
    assert first.is_draining and second.is_draining
    assert second.stop_draining()  # the DELETE reached the other worker
    assert not first.is_draining and not second.is_draining


def test_a_signal_drains_only_the_worker_it_reached(tmp_path: Path) -> None:
    first, second = _workers(tmp_path, str(tmp_path / "drain"))
    first.start_draining("signal")  # the supervisor sends SIGTERM to each worker itself
    assert first.is_draining and not second.is_draining
    second.start_draining("admin")
    assert not first.stop_draining()  # shutting down: its drain cannot be undone
    assert second.stop_draining()
    assert first.is_draining and not second.is_draining


def test_one_process_keeps_its_drain_to_itself(tmp_path: Path) -> None:
    first, second = _workers(tmp_path, None)
    first.start_draining("admin")
    assert first.is_draining and not second.is_draining
    assert first.stop_draining() and not first.is_draining


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.mark.slow
def test_serve_with_two_workers_drains_both(tmp_path: Path, upstream: FakeUpstream) -> None:
    keys = [{"sha256": hash_key(ADMIN), "tenant": "ops", "name": "ops", "role": "admin"}]
    policy = write_policy(tmp_path / "policy.yaml", fake_policy(upstream.base_url, keys=keys))
    drain_file = tmp_path / "drain"  # serve makes one for its workers unless told where
    gateway = GatewayProcess(policy, env={"SORTYARD_DRAIN_FILE": str(drain_file)}, workers=2).wait_ready()
    admin = {"Authorization": f"Bearer {ADMIN}"}

    def readiness() -> set[int]:  # fresh connections: the kernel hands them to either worker
        return {
            httpx.get(gateway.url + "/readyz", headers={"Connection": "close"}).status_code for _ in range(40)
        }

    try:
        assert readiness() == {200}
        drained = httpx.post(gateway.url + "/v1/admin/drain", headers=admin)
        assert drained.status_code == 200 and drained.json()["draining"] is True
        assert readiness() == {503}
        assert drain_file.exists()
        undone = httpx.delete(gateway.url + "/v1/admin/drain", headers=admin)
        assert undone.status_code == 200 and undone.json()["draining"] is False
        assert not drain_file.exists() and readiness() == {200}
    finally:
        gateway.stop()
