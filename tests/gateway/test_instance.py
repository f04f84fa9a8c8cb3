"""gateway/instance.py: the running gateway's own work: request ids, draining, its policy, settling."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.instance import Gateway
from gateway.settings import Settings
from tools.servers.gateway_server import fake_policy, write_policy


@pytest.fixture
def gateway(tmp_path: Path) -> Gateway:
    path = write_policy(tmp_path / "policy.yaml", fake_policy("http://127.0.0.1:9/v1"))
    return create_app(Settings(policy_path=str(path))).gateway


def test_a_sane_request_id_is_kept_else_a_fresh_one_is_made(gateway: Gateway) -> None:
    assert gateway.request_id({"x-request-id": "req-42"}) == "req-42"
    fresh = [
        gateway.request_id(headers)
        for headers in ({}, {"x-request-id": ""}, {"x-request-id": "x" * 129}, {"x-request-id": "é"})
    ]
    fresh.append(gateway.request_id({"x-request-id": "a\nb"}))
    assert len(set(fresh)) == len(fresh)
    assert len({request_id[:12] for request_id in fresh}) == 1  # one prefix a process, then a counter


def test_draining_starts_once_and_stays(gateway: Gateway) -> None:
    assert not gateway.is_draining and gateway.draining_since is None
    gateway.start_draining()
    since = gateway.draining_since
    assert gateway.is_draining and since is not None
    gateway.start_draining()
    assert gateway.draining_since == since


def test_the_policy_is_the_reloaders(gateway: Gateway) -> None:
    assert gateway.compiled is gateway.reloader.compiled
    assert gateway.policy is gateway.reloader.compiled.policy
    assert set(gateway.policy.pools) >= {"small"}


def test_reloads_are_counted_by_result_and_the_first_load_is_none(gateway: Gateway, tmp_path: Path) -> None:
    def count(result: str) -> float:
        value = gateway.metrics.registry.get_sample_value("sortyard_policy_reloads_total", {"result": result})
        return value or 0.0

    assert (count("adopted"), count("refused")) == (0, 0)  # it read 1 adopted: the policy it started on
    path = gateway.reloader.path
    good = path.read_text()
    path.write_text("pools: [\n")
    assert not gateway.reloader.reload()
    path.write_text(good.replace("gpt-4o-mini", "gpt-new"))
    assert gateway.reloader.reload()
    assert (count("adopted"), count("refused")) == (1, 1)  # a refusal was never counted


async def test_settling_with_nothing_in_flight_returns(gateway: Gateway) -> None:
    await gateway.settle()
    await gateway.store.close()
