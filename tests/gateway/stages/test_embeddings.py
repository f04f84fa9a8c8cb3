"""The embeddings cache stage: only misses go upstream, answers are merged back in order and stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.cache import MemoryEmbeddingCache
from gateway.pipeline import Call, Endpoint, Pipeline
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.stages.embeddings import EmbeddingCacheStage
from tests.support.calls import build_call, compile_doc, policy_doc, read_result, upstream_stage


def vector(text: str) -> list[float]:
    """The fake upstream's embedding of ``text``."""
    return [float(len(text)), float(ord(text[0]))]


def embed(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
    inputs = msgspec.json.decode(body)["input"]
    inputs = inputs if isinstance(inputs, list) else [inputs]
    data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(inputs)]
    return Reply.json(
        {
            "object": "list",
            "data": data,
            "model": "served-small",
            "usage": {"prompt_tokens": 4, "total_tokens": 4},
        }
    )


class Setup:
    def __init__(self) -> None:
        self.compiled = compile_doc(policy_doc())
        self.client = MemoryUpstreamClient(embed)
        self.pipeline = Pipeline(
            [EmbeddingCacheStage(MemoryEmbeddingCache()), upstream_stage(self.compiled, self.client)]
        )

    async def embed(self, inputs: str | list[str], **kwargs: Any) -> tuple[Call, list[list[float]]]:
        call = build_call(
            self.compiled, {"model": "small", "input": inputs}, endpoint=Endpoint.EMBEDDINGS, **kwargs
        )
        body = msgspec.json.decode(await read_result(await self.pipeline.run(call)))
        await call.finish()
        assert body["model"] == "small"  # the asked model, hit or miss
        return call, [item["embedding"] for item in body["data"]]

    def sent(self) -> list[Any]:
        return [request.json()["input"] for request in self.client.requests]


async def test_only_misses_go_upstream_and_the_order_is_kept() -> None:
    setup = Setup()
    first, vectors = await setup.embed(["alpha", "beta"])
    assert first.cache_status == "miss" and vectors == [vector("alpha"), vector("beta")]
    mixed, vectors = await setup.embed(["gamma", "alpha", "delta", "beta"])
    assert mixed.cache_status == "miss"
    assert vectors == [vector(t) for t in ("gamma", "alpha", "delta", "beta")]
    assert setup.sent() == [["alpha", "beta"], ["gamma", "delta"]]


async def test_every_input_cached_is_answered_here() -> None:
    setup = Setup()
    await setup.embed(["alpha", "beta"])
    hit, vectors = await setup.embed(["beta", "alpha"])
    assert hit.cache_status == "hit" and hit.response_headers["x-sortyard-cache"] == "hit"
    assert vectors == [vector("beta"), vector("alpha")] and len(setup.client.requests) == 1
    assert hit.usage is not None and hit.usage.input_tokens == 0


async def test_no_store_and_other_tenants_miss() -> None:
    setup = Setup()
    await setup.embed("alpha", tenant="acme", headers={"Cache-Control": "no-store"})
    await setup.embed("alpha", tenant="acme")
    other, _ = await setup.embed("alpha", tenant="globex")
    same, _ = await setup.embed("alpha", tenant="acme")
    assert (other.cache_status, same.cache_status) == ("miss", "hit")
    assert len(setup.client.requests) == 3


async def test_chat_calls_pass_through() -> None:
    compiled = compile_doc(policy_doc())
    call = build_call(compiled)
    await EmbeddingCacheStage(MemoryEmbeddingCache())(call)
    assert call.cache_status is None and call.result_filters == []
