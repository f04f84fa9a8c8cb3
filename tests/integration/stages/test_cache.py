"""The response cache through a real gateway, over the in-process caches and a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY_A, KEY_B = new_key(), new_key()
ASK = {"model": "small", "temperature": 0, "messages": [{"role": "user", "content": "hi there"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    if request.param == "memory":
        monkeypatch.delenv("SORTYARD_REDIS_URL", raising=False)
        return None
    url: str = request.getfixturevalue("redis_flushed")
    monkeypatch.setenv("SORTYARD_REDIS_URL", url)
    return url


def _gateway(tmp_path: Path, upstream: FakeUpstream, cache: dict[str, Any] | None = None) -> GatewayServer:
    document = fake_policy(upstream.base_url)
    document["pools"]["slowecho"] = {"replicas": [{"base_url": upstream.base_url, "model": "slow-echo"}]}
    document["auth"] = {"required": True}
    # the caches' 50 ms bound on a Redis call is for production; on a loaded test machine one slow
    # call would turn the next requests into misses, and these tests are about what is stored
    document["store"] = {"url_env": "SORTYARD_REDIS_URL", "cache_timeout_s": 2}
    document["keys"] = [
        {"sha256": hash_key(KEY_A), "tenant": "a"},
        {"sha256": hash_key(KEY_B), "tenant": "b"},
    ]
    if cache is not None:
        document["cache"] = cache
    return GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()


def _post(gateway: GatewayServer, body: dict[str, Any], key: str = KEY_A, **headers: str) -> httpx.Response:
    """One request, returned once its after-response work (the cache store of a miss) is done."""
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=body,
        timeout=10,
        headers={"Authorization": f"Bearer {key}", **headers},
    )
    gateway.settle()
    return response


def test_deterministic_repeat_hits_and_names_the_asked_model(
    tmp_path: Path, upstream: FakeUpstream, backend: str | None
) -> None:
    gateway = _gateway(tmp_path, upstream)
    try:
        before = len(upstream.requests)
        first = _post(gateway, {**ASK, "model": "gpt-4o-mini"})
        second = _post(gateway, {**ASK, "model": "gpt-4o-mini"})
        assert first.headers["x-sortyard-cache"] == "miss"
        assert second.headers["x-sortyard-cache"] == "hit"
        assert second.json() == first.json() and second.json()["model"] == "gpt-4o-mini"
        assert len(upstream.requests) == before + 1
        sampled = {k: v for k, v in ASK.items() if k != "temperature"}
        assert _post(gateway, sampled).headers["x-sortyard-cache"] == "bypass"
        assert _post(gateway, sampled).headers["x-sortyard-cache"] == "bypass"
        assert _post(gateway, {**sampled, "seed": 7}).headers["x-sortyard-cache"] == "miss"
        assert _post(gateway, {**sampled, "seed": 7}).headers["x-sortyard-cache"] == "hit"
    finally:
        gateway.stop()


def test_cache_control_bypass_and_no_store(
    tmp_path: Path, upstream: FakeUpstream, backend: str | None
) -> None:
    gateway = _gateway(tmp_path, upstream)
    try:
        body = {**ASK, "messages": [{"role": "user", "content": "bypass me"}]}
        assert _post(gateway, body, **{"Cache-Control": "no-store"}).headers["x-sortyard-cache"] == "bypass"
        assert _post(gateway, body).headers["x-sortyard-cache"] == "miss"  # no-store stored nothing
        assert _post(gateway, body, **{"Cache-Control": "no-cache"}).headers["x-sortyard-cache"] == "bypass"
        assert _post(gateway, body).headers["x-sortyard-cache"] == "hit"
    finally:
        gateway.stop()


def test_tenant_b_never_gets_tenant_a_entry(
    tmp_path: Path, upstream: FakeUpstream, backend: str | None
) -> None:
    gateway = _gateway(tmp_path, upstream)
    try:
        body = {**ASK, "messages": [{"role": "user", "content": "secret of tenant a"}]}
        assert _post(gateway, body, KEY_A).headers["x-sortyard-cache"] == "miss"
        assert _post(gateway, body, KEY_A).headers["x-sortyard-cache"] == "hit"
        assert _post(gateway, body, KEY_B).headers["x-sortyard-cache"] == "miss"
    finally:
        gateway.stop()


def test_streams_are_stored_and_replayed_faithfully(
    tmp_path: Path, upstream: FakeUpstream, backend: str | None
) -> None:
    gateway = _gateway(tmp_path, upstream)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0)
    try:
        messages: Any = [{"role": "user", "content": "stream me"}]
        fresh = list(
            client.chat.completions.create(model="small", messages=messages, temperature=0, stream=True)
        )
        gateway.settle()  # the stream is stored once it has ended, after the client read [DONE]
        raw = client.chat.completions.with_raw_response.create(
            model="small",
            messages=messages,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        assert raw.headers["x-sortyard-cache"] == "hit"
        replayed = list(raw.parse())
        gateway.settle()
        text = "".join(c.choices[0].delta.content or "" for c in replayed if c.choices)
        assert text == "".join(c.choices[0].delta.content or "" for c in fresh if c.choices)
        assert text == "Hello from the fake upstream."
        assert replayed[-1].usage is not None and replayed[-1].usage.completion_tokens == 6
        assert [c.choices[0].finish_reason for c in replayed if c.choices][-1] == "stop"
        plain = client.chat.completions.with_raw_response.create(
            model="small", messages=messages, temperature=0
        )
        assert plain.headers["x-sortyard-cache"] == "hit"
        assert plain.parse().choices[0].message.content == text
    finally:
        gateway.stop()


def test_ttl_expiry_and_size_limit(tmp_path: Path, upstream: FakeUpstream, backend: str | None) -> None:
    # a TTL long enough that the hit right after the store never races it; sleeping past it is exact
    gateway = _gateway(tmp_path, upstream, {"response": {"ttl_s": 2}, "pools": {"fail": {"ttl_s": 10}}})
    try:
        body = {**ASK, "messages": [{"role": "user", "content": "expire me"}]}
        assert _post(gateway, body).headers["x-sortyard-cache"] == "miss"
        stored_at = time.monotonic()
        assert _post(gateway, body).headers["x-sortyard-cache"] == "hit"
        time.sleep(max(0.0, stored_at + 2.05 - time.monotonic()))
        assert _post(gateway, body).headers["x-sortyard-cache"] == "miss"
    finally:
        gateway.stop()
    gateway = _gateway(tmp_path, upstream, {"response": {"max_entry_bytes": 64}})
    try:
        body = {**ASK, "messages": [{"role": "user", "content": "too big to keep"}]}
        assert _post(gateway, body).headers["x-sortyard-cache"] == "miss"
        assert _post(gateway, body).headers["x-sortyard-cache"] == "miss"
    finally:
        gateway.stop()


def test_identical_concurrent_misses_make_one_upstream_call(
    tmp_path: Path, upstream: FakeUpstream, backend: str | None
) -> None:
    gateway = _gateway(tmp_path, upstream)
    body = {**ASK, "model": "slowecho", "messages": [{"role": "user", "content": f"flight {backend}"}]}

    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10, headers={"Authorization": f"Bearer {KEY_A}"}) as http:
            return await asyncio.gather(
                *(http.post(gateway.url + "/v1/chat/completions", json=body) for _ in range(10))
            )

    try:
        before = sum(1 for r in upstream.requests if r.get("model") == "slow-echo")
        responses = asyncio.run(fire())
        assert all(r.status_code == 200 for r in responses)
        after = sum(1 for r in upstream.requests if r.get("model") == "slow-echo")
        assert after - before == 1
        assert len({r.json()["choices"][0]["message"]["content"] for r in responses}) == 1
    finally:
        gateway.stop()


def test_corrupt_entry_in_redis_is_a_miss_and_is_deleted(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SORTYARD_REDIS_URL", redis_flushed)
    gateway = _gateway(tmp_path, upstream)
    client = redis.Redis.from_url(redis_flushed)
    try:
        body = {**ASK, "messages": [{"role": "user", "content": "corrupt me"}]}
        assert _post(gateway, body).headers["x-sortyard-cache"] == "miss"
        keys = [k for k in client.keys("*:rc:*") if isinstance(k, bytes) and not k.endswith(b":lock")]
        assert len(keys) == 1
        entry = client.get(keys[0])
        assert isinstance(entry, bytes)
        for damaged in (b"garbage", entry[:-7]):  # foreign bytes, then a truncated entry
            client.set(keys[0], damaged)
            response = _post(gateway, body)
            assert response.status_code == 200 and response.headers["x-sortyard-cache"] == "miss"
            assert response.json()["choices"][0]["message"]["content"] == "Hello from the fake upstream."
        assert _post(gateway, body).headers["x-sortyard-cache"] == "hit"
    finally:
        gateway.stop()
        client.close()


def test_a_fallback_pools_answer_is_not_stored(
    tmp_path: Path, upstream: FakeUpstream, backend: str | None
) -> None:
    document = fake_policy(upstream.base_url)
    document["pools"]["primary"] = {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "echo"}]}
    document["routing"] = {"health": {"probe_interval_s": 0}, "pools": {"primary": {"fallbacks": ["small"]}}}
    document["retry"] = {"max_attempts": 2, "backoff_s": 0.001}
    document["store"] = {"url_env": "SORTYARD_REDIS_URL"}
    gateway = GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()
    try:
        body = {**ASK, "model": "primary", "messages": [{"role": "user", "content": "fall back"}]}
        for _ in range(2):  # another model answered: this pool's cache never keeps it
            response = _post(gateway, body)
            assert response.status_code == 200 and response.headers["x-sortyard-fallback-pool"] == "small"
            assert response.headers["x-sortyard-cache"] == "miss"
    finally:
        gateway.stop()
