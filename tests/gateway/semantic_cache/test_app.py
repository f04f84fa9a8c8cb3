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
