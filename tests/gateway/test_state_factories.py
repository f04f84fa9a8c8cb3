"""gateway/state_factories.py: what replicas share is built in Redis when the policy's URL variable is
set, else in this process (run-time keys: in the settings' file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.cache import MemoryAffinityMap, MemoryResponseCache, RedisAffinityMap, RedisResponseCache
from gateway.cache.blobs import MemoryBlobs, RedisBlobs
from gateway.cache.embedding_cache import MemoryEmbeddingCache, RedisEmbeddingCache
from gateway.keys.redis_store import RedisKeyStore
from gateway.keys.store import FileKeyStore
from gateway.policy import Policy, parse_policy
from gateway.semantic_cache import RedisSemanticLog
from gateway.settings import Settings
from gateway.state_factories import build_caches, build_key_store, build_store
from gateway.stores import CreditStore, FailoverStore, MemoryStore, RedisStore
from gateway.telemetry.metrics import Metrics

URL_ENV = "SORTYARD_REDIS_URL"
UNREACHABLE = "redis://127.0.0.1:1/0"
"""Nothing is sent there: the factories only build, and a Redis client connects on first use."""


def policy(**store: Any) -> Policy:
    replica = {"base_url": "http://h/v1", "model": "m"}
    return parse_policy({"pools": {"small": {"replicas": [replica]}}, "store": store}, "test")


@pytest.mark.parametrize("url", [None, ""])
async def test_without_a_url_everything_is_in_this_process(
    url: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if url is None:
        monkeypatch.delenv(URL_ENV, raising=False)
    else:
        monkeypatch.setenv(URL_ENV, url)  # set but empty: no URL
    store = build_store(policy())
    assert isinstance(store, MemoryStore)
    caches = build_caches(policy(), Metrics())
    assert isinstance(caches.responses, MemoryResponseCache)
    assert isinstance(caches.affinity, MemoryAffinityMap)
    assert isinstance(caches.embeddings, MemoryEmbeddingCache)
    assert isinstance(caches.sticky, MemoryBlobs)
    keys = build_key_store(policy(), Settings(keys_file=str(tmp_path / "keys.json")))
    assert isinstance(keys, FileKeyStore) and keys.path == tmp_path / "keys.json"
    await caches.close()
    await store.close()


async def test_with_a_url_the_store_caches_and_keys_are_in_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    fell_back: list[str] = []
    store = build_store(policy(on_failure="fail_closed"), on_fallback=fell_back.append)
    assert isinstance(store, FailoverStore) and store.mode == "fail_closed"
    assert isinstance(store.primary, CreditStore) and isinstance(store.fallback, MemoryStore)
    caches = build_caches(policy(), Metrics())
    assert isinstance(caches.responses, RedisResponseCache)
    assert isinstance(caches.affinity, RedisAffinityMap)
    assert isinstance(caches.embeddings, RedisEmbeddingCache)
    assert isinstance(caches.sticky, RedisBlobs)
    keys = build_key_store(policy(), Settings(keys_file="unused.json"))  # Redis: every replica sees them
    assert isinstance(keys, RedisKeyStore)
    await keys.close()
    await caches.close()
    await store.close()
    assert fell_back == []


async def test_every_cache_bounds_its_redis_calls_by_the_policys_cache_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    for timeout_s in (0.05, 1.5):  # the default, and a far Redis's
        caches = build_caches(policy(cache_timeout_s=timeout_s), Metrics())
        assert isinstance(caches.responses, RedisResponseCache)
        assert isinstance(caches.affinity, RedisAffinityMap) and isinstance(
            caches.embeddings, RedisEmbeddingCache
        )
        assert isinstance(caches.sticky, RedisBlobs)
        semantic_log = caches.semantic.log
        assert isinstance(semantic_log, RedisSemanticLog)
        guarded = [caches.responses.blobs, caches.affinity.blobs, caches.embeddings.blobs, caches.sticky]
        guarded.append(semantic_log.blobs)
        assert {b.guard.timeout_s for b in guarded if isinstance(b, RedisBlobs)} == {timeout_s}
        assert len([b for b in guarded if isinstance(b, RedisBlobs)]) == 5
        await caches.close()


async def test_without_local_credit_every_request_goes_to_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    store = build_store(policy(local_credit=False))
    assert isinstance(store, FailoverStore) and type(store.primary) is RedisStore
    assert store.mode == "fail_open"
    await store.close()


async def test_a_policy_without_a_url_variable_ignores_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_ENV, UNREACHABLE)
    store = build_store(policy(url_env=None))
    assert isinstance(store, MemoryStore)
    caches = build_caches(policy(url_env=None), Metrics())
    assert isinstance(caches.responses, MemoryResponseCache)
    assert isinstance(build_key_store(policy(url_env=None), Settings()), FileKeyStore)
    await caches.close()
    await store.close()
