"""gateway/settings.py: the upstream pool's keep-alive, read from the environment and handed to the
client, and kept below the servers' own idle timeout."""

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
