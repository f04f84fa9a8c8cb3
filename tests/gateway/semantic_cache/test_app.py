"""Through the app: two gateways on one Redis, a fake upstream serving chat and embeddings; a
paraphrase asked of the second is answered with the first's answer, with the cache headers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.policy import parse_policy
from gateway.reloader import PolicyReloader
from gateway.semantic_cache import SemanticCache
from gateway.settings import Settings
from tests.gateway.semantic_cache.fake_upstream import FakeUpstream, semantic_policy


@asynccontextmanager
async def gateway(upstream: FakeUpstream) -> AsyncIterator[httpx.AsyncClient]:
    document = {**semantic_policy(), "store": {"url_env": "SEMANTIC_TEST_REDIS_URL"}}
    reloader = PolicyReloader("unused.yaml", policy=parse_policy(document, "test"))
    app = create_app(Settings(), client=upstream.client, reloader=reloader)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        yield client
    await app.gateway.caches.close()  # no lifespan under ASGITransport: close the Redis connections


def chat(question: str) -> dict[str, Any]:
    return {"model": "small", "temperature": 0, "messages": [{"role": "user", "content": question}]}


async def test_a_paraphrase_hits_on_another_gateway(
    redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEMANTIC_TEST_REDIS_URL", redis_flushed)
    upstream = FakeUpstream()
    async with gateway(upstream) as first, gateway(upstream) as second:
        asked = await first.post("/v1/chat/completions", json=chat("What is the capital of France?"))
        assert asked.status_code == 200 and asked.headers["x-sortyard-cache"] == "miss"
        hit = await second.post("/v1/chat/completions", json=chat("Tell me the capital city of France."))
        assert hit.status_code == 200
        assert hit.headers["x-sortyard-cache"] == "semantic-hit"
        assert float(hit.headers["x-sortyard-cache-similarity"]) >= 0.9
        assert hit.json()["choices"][0]["message"]["content"] == "answer to: What is the capital of France?"
        other = await second.post("/v1/chat/completions", json=chat("What is the capital of Spain?"))
        assert other.headers["x-sortyard-cache"] == "miss"
    assert upstream.asked == ["What is the capital of France?", "What is the capital of Spain?"]


def ask(question: str, *context: tuple[str, str], **fields: Any) -> dict[str, Any]:
    messages = [{"role": r, "content": c} for r, c in context] + [{"role": "user", "content": question}]
    return {"model": "small", "temperature": 0, "messages": messages, **fields}


async def served(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    return response.headers["x-sortyard-cache"]


async def test_a_hit_needs_the_same_context_whole(
    redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEMANTIC_TEST_REDIS_URL", redis_flushed)
    preamble = "You answer questions about the user's finances, briefly and exactly. " * 4  # > 256 chars
    async with gateway(FakeUpstream()) as client:
        budgets = [("system", preamble + f"My monthly budget is {n} dollars.") for n in (5000, 9000)]
        assert await served(client, ask("What is my monthly budget?", budgets[0])) == "miss"
        assert await served(client, ask("What is my monthly budget?", budgets[1])) == "miss"
        assert await served(client, ask("Tell me my monthly budget.", budgets[1])) == "semantic-hit"
        earlier = [
            [("user", preamble + f"I earn {n} dollars."), ("assistant", "Noted.")] for n in (6000, 7000)
        ]
        assert await served(client, ask("What do I earn?", *earlier[0])) == "miss"
        assert await served(client, ask("Tell me what I earn.", *earlier[1])) == "miss"
        assert await served(client, ask("Tell me what I earn.", *earlier[0])) == "semantic-hit"


async def test_a_hit_needs_the_same_answer_shaping_fields(
    redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEMANTIC_TEST_REDIS_URL", redis_flushed)
    async with gateway(FakeUpstream()) as client:
        assert await served(client, ask("What is the capital of France?", max_tokens=300)) == "miss"
        for fields in ({"max_tokens": 200}, {"logprobs": True, "top_logprobs": 2}, {"stop": ["."]}):
            assert await served(client, ask("Tell me the capital city of France.", **fields)) == "miss"
        asked = ask("Tell me the capital city of France.", max_tokens=300, stream=False, user="u-1")
        assert await served(client, asked) == "semantic-hit"


async def test_a_cut_answer_is_never_stored(redis_flushed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMANTIC_TEST_REDIS_URL", redis_flushed)
    upstream = FakeUpstream()
    async with gateway(upstream) as client:
        cut = await client.post(
            "/v1/chat/completions", json=ask("Explain what photosynthesis is.", max_tokens=3)
        )
        assert cut.json()["choices"][0]["finish_reason"] == "length"
        assert await served(client, ask("Explain photosynthesis.", max_tokens=3)) == "miss"
    assert len(upstream.asked) == 2


async def test_a_failing_cache_serves_a_miss(redis_flushed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEMANTIC_TEST_REDIS_URL", redis_flushed)

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(SemanticCache, "lookup", broken)
    monkeypatch.setattr(SemanticCache, "store", broken)
    upstream = FakeUpstream()
    async with gateway(upstream) as client:
        assert await served(client, ask("What is the capital of France?")) == "miss"
        monkeypatch.undo()  # the store failed: nothing to find
        monkeypatch.setenv("SEMANTIC_TEST_REDIS_URL", redis_flushed)
        assert await served(client, ask("Tell me the capital city of France.")) == "miss"
    assert len(upstream.asked) == 2
