"""Fixtures for the reliability suite: a real gateway in front of the fake upstream, module-wide."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    document = fake_policy(upstream.base_url)
    # two replicas: prefix affinity hashes the body too, so every stage that walks a body runs
    document["pools"]["small"]["replicas"].append({"base_url": upstream.base_url, "model": "echo"})
    # a hung upstream is never cut by the gateway's own timeouts within a test: only a client can end it
    document["pools"]["hang"]["timeouts"] = {"first_byte_s": 600, "total_s": 600}
    path: Path = write_policy(tmp_path_factory.mktemp("reliability") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()
