"""gateway/stages/semantic_cache.py: paraphrases are answered from the cache, with the header."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.cache import MemoryResponseCache
from gateway.pipeline import Call, Pipeline
from gateway.policy import PolicyError
from gateway.semantic_cache import MemorySemanticLog, QueryEmbedder, SemanticCache
from gateway.stages.semantic_cache import SemanticCacheStage
from tests.gateway.semantic_cache.fake_upstream import FakeUpstream, semantic_policy
from tests.support.calls import balancer_for, build_call, compile_doc, read_result, upstream_stage

FRANCE = "What is the capital of France?"
PARAPHRASE = "Tell me the capital city of France."


class Setup:
    def __init__(self, **semantic: Any) -> None:
        self.compiled = compile_doc(semantic_policy(**semantic))
        self.upstream = FakeUpstream()
        balancer = balancer_for(self.compiled)
        self.lookups: list[float] = []
        stage = SemanticCacheStage(
            SemanticCache(MemorySemanticLog()),
            QueryEmbedder(self.upstream.client, balancer, MemoryResponseCache()),
            observe_lookup_s=self.lookups.append,
        )
        self.pipeline = Pipeline([stage, upstream_stage(self.compiled, self.upstream.client, balancer)])

    async def ask(self, question: str, **fields: Any) -> tuple[Call, bytes]:
        headers = fields.pop("headers", None)
        body = {
            "model": "small",
            "messages": [{"role": "user", "content": question}],
            "temperature": 0,
            **fields,
        }
        call = build_call(self.compiled, body, headers=headers, tenant=fields.pop("tenant", None))
        call.is_stream = bool(body.get("stream"))
        result = await self.pipeline.run(call)
        payload = await read_result(result)
        await call.finish()  # as the proxy does
        return call, payload


def content(payload: bytes) -> str:
    return str(msgspec.json.decode(payload)["choices"][0]["message"]["content"])


async def test_a_paraphrase_gets_the_answered_prompt_s_answer() -> None:
    setup = Setup()
    first, _ = await setup.ask(FRANCE)
    hit, payload = await setup.ask(PARAPHRASE)
    assert first.cache_status is None and "x-sortyard-cache" not in first.response_headers
    assert hit.cache_status == "semantic-hit"
    assert hit.response_headers["x-sortyard-cache"] == "semantic-hit"
    assert float(hit.response_headers["x-sortyard-cache-similarity"]) >= 0.9
    assert content(payload) == f"answer to: {FRANCE}"
    assert setup.upstream.asked == [FRANCE]  # the paraphrase never went upstream
    assert hit.usage is not None and hit.usage.output_tokens == 0
    assert len(setup.lookups) == 2


async def test_other_subjects_and_other_tenants_miss() -> None:
    setup = Setup()
    await setup.ask(FRANCE, tenant="acme")
    spain, _ = await setup.ask("What is the capital of Spain?", tenant="acme")
    other, _ = await setup.ask(PARAPHRASE, tenant="globex")
    assert spain.cache_status is None and other.cache_status is None
    assert len(setup.upstream.asked) == 3


async def test_sampled_requests_are_skipped_unless_allowed() -> None:
    setup = Setup()
    await setup.ask(FRANCE, temperature=0.7)
    await setup.ask(PARAPHRASE, temperature=0.7)
    assert setup.upstream.embedded == [] and len(setup.upstream.asked) == 2
    allowing = Setup(allow_sampled=True)
    await allowing.ask(FRANCE, temperature=0.7)
    hit, _ = await allowing.ask(PARAPHRASE, temperature=0.7)
    other_sampling, _ = await allowing.ask(PARAPHRASE, top_p=0.5)  # the sampling is in the scope
    assert hit.cache_status == "semantic-hit" and other_sampling.cache_status is None


async def test_the_pool_threshold_override_and_the_pool_list_apply() -> None:
    loose_question = "The capital of France, the big one?"  # a cosine of about 0.7 in the toy embedding
    strict, loose = Setup(threshold=0.99), Setup(threshold=0.99, thresholds={"small": 0.6})
    for setup in (strict, loose):
        await setup.ask(FRANCE)
    far, _ = await strict.ask(loose_question)
    near, _ = await loose.ask(loose_question)
    assert far.cache_status is None and near.cache_status == "semantic-hit"
    elsewhere = Setup(pools=["large"])
    await elsewhere.ask(FRANCE)
    assert elsewhere.upstream.embedded == []


async def test_cache_control_no_store_skips_and_no_cache_still_stores() -> None:
    setup = Setup()
    await setup.ask(FRANCE, headers={"Cache-Control": "no-store"})
    refreshed, _ = await setup.ask(FRANCE, headers={"Cache-Control": "no-cache"})
    hit, _ = await setup.ask(PARAPHRASE)
    assert refreshed.cache_status is None and hit.cache_status == "semantic-hit"
    assert len(setup.upstream.asked) == 2


async def test_streams_are_stored_and_replayed() -> None:
    setup = Setup()
    await setup.ask(FRANCE, stream=True)  # a streamed miss is rebuilt from its deltas and stored
    plain, payload = await setup.ask(PARAPHRASE)
    assert plain.cache_status == "semantic-hit" and content(payload) == f"answer to: {FRANCE}"
    replayed, stream = await setup.ask("France's capital city?", stream=True)
    assert replayed.cache_status == "semantic-hit"
    events = [line[6:] for line in stream.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(
        c["delta"].get("content") or "" for e in events[:-1] for c in msgspec.json.decode(e)["choices"]
    )
    assert text == f"answer to: {FRANCE}"
    assert setup.upstream.asked == [FRANCE]


def test_a_policy_naming_an_unknown_pool_is_refused() -> None:
    with pytest.raises(PolicyError, match=r"cache\.semantic: unknown pool 'embedder'"):
        compile_doc(semantic_policy(pool="embedder"))
