"""gateway/settings.py: the upstream pool's keep-alive, read from the environment and handed to the
client, and kept below the servers' own idle timeout; the gateway's region, refused at start when it is
no region name."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import uvicorn

from gateway.app import create_app
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.settings import Settings
from tools.servers.gateway_server import fake_policy, write_policy


def test_the_keepalive_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).upstream_keepalive_s == 4.0
    assert Settings.from_env({"SORTYARD_UPSTREAM_KEEPALIVE_S": "2.5"}).upstream_keepalive_s == 2.5
    with pytest.raises(ValueError, match="SORTYARD_UPSTREAM_KEEPALIVE_S"):
        Settings.from_env({"SORTYARD_UPSTREAM_KEEPALIVE_S": "0"})


def test_idle_connections_leave_the_pool_before_uvicorn_closes_them() -> None:
    """vLLM and the reference engine serve on uvicorn: a connection pooled past its idle timeout could
    carry a request into the server's close and fail unanswered."""
    uvicorn_idle_s = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
    assert Settings().upstream_keepalive_s < uvicorn_idle_s
    assert Http1UpstreamClient().keepalive_s == Settings().upstream_keepalive_s


def test_the_app_pools_with_the_settings_keepalive(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "policy.yaml", fake_policy("http://127.0.0.1:9/v1"))
    gateway = create_app(Settings(policy_path=str(path), upstream_keepalive_s=1.5)).gateway
    assert isinstance(gateway.client, Http1UpstreamClient) and gateway.client.keepalive_s == 1.5


def test_the_region_is_read_from_the_environment_and_reaches_the_balancer(tmp_path: Path) -> None:
    assert Settings.from_env({}).region is None
    assert Settings.from_env({"SORTYARD_REGION": ""}).region is None  # set empty in a manifest: unset
    settings = Settings.from_env({"SORTYARD_REGION": "eu-west-1"})
    assert settings.region == "eu-west-1"
    path = write_policy(tmp_path / "policy.yaml", fake_policy("http://127.0.0.1:9/v1"))
    gateway = create_app(Settings(policy_path=str(path), region="eu-west-1")).gateway
    assert gateway.balancer.regions.local == "eu-west-1"


@pytest.mark.parametrize("name", ["eu west", "m\u00fcnchen", "eu\r\nx-injected: 1", "-eu", "e" * 64])
def test_a_region_that_could_not_be_a_header_or_label_is_refused_at_start(name: str) -> None:
    """It goes into the response's route header and a metric label: a value outside the region names
    would fail every request (non-ASCII, CR/LF) or make labels nobody can query, so start fails."""
    with pytest.raises(ValueError, match="SORTYARD_REGION"):
        Settings.from_env({"SORTYARD_REGION": name})
