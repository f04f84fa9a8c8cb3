"""The response cache stage: hit, miss and bypass; what its finisher stores; streams replayed."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.cache import MemoryResponseCache, SingleFlight
from gateway.pipeline import BytesResult, Call, Pipeline, StreamResult, Usage
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.stages.cache import ResponseCacheStage
from tests.support.calls import (
    USER_HI,
    build_call,
    chat_chunk,
    chat_completion,
    compile_doc,
    policy_doc,
    read_result,
    served_model,
    upstream_stage,
)

SERVED = served_model("small")
ASK = {"model": "small", "messages": USER_HI, "temperature": 0}


class Setup:
    """A cache stage in front of an in-memory upstream that answers every chat, plain or streamed."""

    def __init__(self, **document: Any) -> None:
        self.compiled = compile_doc(policy_doc(**document))
        cache = MemoryResponseCache()
        self.stage = ResponseCacheStage(cache, SingleFlight(cache))
        self.client = MemoryUpstreamClient(self._answer)
        self.pipeline = Pipeline([self.stage, upstream_stage(self.compiled, self.client)])

    @staticmethod
    def _answer(url: str, body: bytes, headers: object) -> Reply:
        if msgspec.json.decode(body).get("stream"):
            return Reply.sse(
                chat_chunk(SERVED, "Hello."),
                chat_chunk(SERVED, finish="stop"),
                chat_chunk(SERVED, usage=(9, 2)),
            )
        return Reply.json(chat_completion(SERVED))

    async def ask(self, body: dict[str, Any] = ASK, **kwargs: Any) -> tuple[Call, bytes]:
        """Run the call through the pipeline, read its response, and finish it (as the proxy does)."""
        call = build_call(self.compiled, body, **kwargs)
        data = await read_result(await self.pipeline.run(call))
        await call.finish()
        return call, data


async def test_a_deterministic_repeat_is_a_hit_without_an_upstream_call() -> None:
    setup = Setup()
    first, body = await setup.ask()
    second, again = await setup.ask()
    assert (first.cache_status, second.cache_status) == ("miss", "hit")
    assert second.response_headers["x-sortyard-cache"] == "hit"
    assert again == body and len(setup.client.requests) == 1
    assert second.usage == Usage(0, 0)  # hits spend no tokens unless the policy says so


async def test_hits_consume_tokens_when_the_policy_says_so() -> None:
    setup = Setup(cache={"response": {"hits_consume_tokens": True}})
    await setup.ask()
    hit, _ = await setup.ask()
    assert hit.usage == Usage(11, 3)


async def test_nondeterministic_requests_and_no_cache_bypass() -> None:
    setup = Setup()
    sampled, _ = await setup.ask({"model": "small", "messages": USER_HI, "temperature": 0.7})
    forced, _ = await setup.ask(headers={"Cache-Control": "no-cache"})
    assert (sampled.cache_status, forced.cache_status) == ("bypass", "bypass")
    assert sampled.response_headers["x-sortyard-cache"] == "bypass"
    miss, _ = await setup.ask()
    assert miss.cache_status == "miss"  # the bypasses stored nothing


async def test_no_store_looks_up_but_never_stores() -> None:
    setup = Setup()
    await setup.ask(headers={"Cache-Control": "no-store"})
    call, _ = await setup.ask()
    assert call.cache_status == "miss" and len(setup.client.requests) == 2


async def test_entries_are_per_tenant() -> None:
    setup = Setup()
    await setup.ask(tenant="acme")
    other, _ = await setup.ask(tenant="globex")
    same, _ = await setup.ask(tenant="acme")
    assert (other.cache_status, same.cache_status) == ("miss", "hit")


async def test_a_stream_is_stored_and_replayed_as_a_stream() -> None:
    setup = Setup()
    body = {**ASK, "stream": True}
    first, streamed = await setup.ask(body)
    second, replayed = await setup.ask(body)
    assert (first.cache_status, second.cache_status) == ("miss", "hit")
    assert isinstance(second.result, StreamResult)
    assert replayed.endswith(b"data: [DONE]\n\n") and b"Hello." in replayed and b"Hello." in streamed
    assert len(setup.client.requests) == 1


async def test_a_failed_call_stores_nothing() -> None:
    setup = Setup()
    call = build_call(setup.compiled, ASK)
    await setup.stage(call)
    call.result = BytesResult(500, b"{}")
    await call.finish()
    again, _ = await setup.ask()
    assert again.cache_status == "miss"
