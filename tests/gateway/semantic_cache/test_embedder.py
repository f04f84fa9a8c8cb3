"""gateway/semantic_cache/embedder.py: the embedding pool through the gateway's own client, cached,
with single flight on identical texts; a failure answers None, never an error."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import numpy as np

from gateway.cache import MemoryResponseCache
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.semantic_cache.embedder import QueryEmbedder
from tests.gateway.semantic_cache.fake_upstream import FakeUpstream, semantic_policy, toy_vector
from tests.support.calls import balancer_for, compile_doc

COMPILED = compile_doc(semantic_policy())
CONFIG = COMPILED.policy.cache.semantic


def embedder(client: MemoryUpstreamClient) -> QueryEmbedder:
    return QueryEmbedder(client, balancer_for(COMPILED), MemoryResponseCache())


async def test_a_text_is_embedded_once_and_identical_texts_share_the_call() -> None:
    upstream = FakeUpstream()
    gate = asyncio.Event()
    inner = upstream.handle

    async def slow(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        await gate.wait()
        return inner(url, body, headers)

    upstream.client = MemoryUpstreamClient(slow)
    embed = embedder(upstream.client)
    calls = [
        asyncio.create_task(embed.embed(COMPILED.policy, "acme", CONFIG, "capital of France"))
        for _ in range(3)
    ]
    await asyncio.sleep(0)
    gate.set()
    vectors = await asyncio.gather(*calls)
    again = await embed.embed(COMPILED.policy, "acme", CONFIG, "capital of France")
    assert upstream.embedded == ["capital of France"]  # one call: single flight, then the cache
    for vector in [*vectors, again]:
        assert vector is not None and np.allclose(vector, toy_vector("capital of France"), atol=1e-6)
    request = upstream.client.requests[0]
    assert request.url == "http://embed-0.test/v1/embeddings"
    assert request.json() == {"model": "served-embed", "input": "capital of France"}


async def test_failures_answer_none() -> None:
    broken = embedder(MemoryUpstreamClient(lambda url, body, headers: Reply.json({"error": "x"}, status=500)))
    assert await broken.embed(COMPILED.policy, "acme", CONFIG, "q") is None
    garbled = embedder(MemoryUpstreamClient(lambda url, body, headers: Reply.json({"data": []})))
    assert await garbled.embed(COMPILED.policy, "acme", CONFIG, "q") is None

    async def hang(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    fast = compile_doc(semantic_policy(timeout_s=0.05))
    slow = QueryEmbedder(MemoryUpstreamClient(hang), balancer_for(fast), MemoryResponseCache())
    assert await slow.embed(fast.policy, "acme", fast.policy.cache.semantic, "q") is None
