"""The embedding cache: per input and model; only the misses go upstream, merged in order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tools.servers.fake_upstream import FakeUpstream, fake_vector
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy


@pytest.fixture
def setup(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[GatewayServer, FakeUpstream]]:
    monkeypatch.setenv("SORTYARD_REDIS_URL", request.getfixturevalue("redis_flushed"))
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    # a cache's 50 ms bound on a Redis call is for production: on a loaded test machine one slow call
    # would turn the next requests into misses, and this is about what is stored
    document["store"] = {"url_env": "SORTYARD_REDIS_URL", "cache_timeout_s": 2}
    # "primary" is down and falls back to "backup", whose replica serves another embedding model
    document["pools"]["primary"] = {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "echo"}]}
    document["pools"]["backup"] = {"replicas": [{"base_url": upstream.base_url, "model": "other-embedder"}]}
    document["routing"] = {"health": {"probe_interval_s": 0}, "pools": {"primary": {"fallbacks": ["backup"]}}}
    document["retry"] = {"max_attempts": 2, "backoff_s": 0.001}
    gateway = GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()
    yield gateway, upstream
    gateway.stop()
    upstream.stop()


def _vectors(*texts: str, model: str = "echo") -> list[list[float]]:
    """What the fake upstream answers for these inputs (``echo`` serves the pool ``small``)."""
    return [fake_vector(model, text) for text in texts]


def test_only_misses_go_upstream_and_order_is_kept(setup: tuple[GatewayServer, FakeUpstream]) -> None:
    gateway, upstream = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0)
    first = client.embeddings.with_raw_response.create(model="small", input=["a", "b"])
    assert first.headers["x-sortyard-cache"] == "miss"
    assert upstream.requests[-1]["input"] == ["a", "b"]
    assert [d.embedding for d in first.parse().data] == _vectors("a", "b")

    # a miss between two hits: the fresh vector lands in the middle
    second = client.embeddings.with_raw_response.create(model="small", input=["a", "c", "b"])
    assert second.headers["x-sortyard-cache"] == "miss"
    assert upstream.requests[-1]["input"] == ["c"]
    data = second.parse().data
    assert [d.index for d in data] == [0, 1, 2]
    assert [d.embedding for d in data] == _vectors("a", "c", "b")

    # hits and misses interleaved, two misses: each fresh vector goes back to its own place
    third = client.embeddings.with_raw_response.create(model="small", input=["c", "d", "a", "e"])
    assert third.headers["x-sortyard-cache"] == "miss"
    assert upstream.requests[-1]["input"] == ["d", "e"]
    data = third.parse().data
    assert [d.index for d in data] == [0, 1, 2, 3]
    assert [d.embedding for d in data] == _vectors("c", "d", "a", "e")

    # every input a hit, in an order never sent before: nothing goes upstream
    before = len(upstream.requests)
    fourth = client.embeddings.with_raw_response.create(model="gpt-4o-mini", input=["e", "c", "a"])
    assert fourth.headers["x-sortyard-cache"] == "hit" and len(upstream.requests) == before
    parsed = fourth.parse()
    assert parsed.model == "gpt-4o-mini"
    assert [d.embedding for d in parsed.data] == _vectors("e", "c", "a")
    single = client.embeddings.with_raw_response.create(model="small", input="d")
    assert single.headers["x-sortyard-cache"] == "hit"
    assert [d.embedding for d in single.parse().data] == _vectors("d")


def test_vectors_a_fallback_pool_served_are_not_stored(setup: tuple[GatewayServer, FakeUpstream]) -> None:
    gateway, upstream = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0)
    for _ in range(2):  # the second time is a miss again: the fallback's vectors were not kept
        before = len(upstream.requests)
        raw = client.embeddings.with_raw_response.create(model="primary", input=["a", "b"])
        assert raw.headers["x-sortyard-fallback-pool"] == "backup"
        assert raw.headers["x-sortyard-cache"] == "miss"
        assert len(upstream.requests) == before + 1
        assert [d.embedding for d in raw.parse().data] == _vectors("a", "b", model="other-embedder")
