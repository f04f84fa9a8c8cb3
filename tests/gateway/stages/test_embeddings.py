"""The embedding cache: per input and model; only the misses go upstream, merged in order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway_server import GatewayServer, fake_policy, write_policy


@pytest.fixture
def setup(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[GatewayServer, FakeUpstream]]:
    monkeypatch.setenv("SWITCHYARD_REDIS_URL", request.getfixturevalue("redis_flushed"))
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["store"] = {"url_env": "SWITCHYARD_REDIS_URL"}
    gateway = GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()
    yield gateway, upstream
    gateway.stop()
    upstream.stop()


def test_only_misses_go_upstream_and_order_is_kept(setup: tuple[GatewayServer, FakeUpstream]) -> None:
    gateway, upstream = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0)
    first = client.embeddings.with_raw_response.create(model="small", input=["a", "b"])
    assert first.headers["x-switchyard-cache"] == "miss"
    assert upstream.requests[-1]["input"] == ["a", "b"]
    second = client.embeddings.with_raw_response.create(model="small", input=["a", "c", "b"])
    assert second.headers["x-switchyard-cache"] == "miss"
    assert upstream.requests[-1]["input"] == ["c"]
    data = second.parse().data
    assert [d.index for d in data] == [0, 1, 2] and all(len(d.embedding) == 3 for d in data)
    before = len(upstream.requests)
    third = client.embeddings.with_raw_response.create(model="gpt-4o-mini", input=["c", "a"])
    assert third.headers["x-switchyard-cache"] == "hit" and len(upstream.requests) == before
    parsed = third.parse()
    assert parsed.model == "gpt-4o-mini" and [d.embedding for d in parsed.data] == [[0.1, 0.2, 0.3]] * 2
    single = client.embeddings.with_raw_response.create(model="small", input="a")
    assert single.headers["x-switchyard-cache"] == "hit"
