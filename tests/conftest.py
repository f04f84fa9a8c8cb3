"""Shared fixtures: a real Redis for the whole session, flushed per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer, find_redis_binary, real_redis


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis server (see tests/support/redis_server.py for how it is found)."""
    with real_redis() as (url, _server):
        yield url


@pytest.fixture
def redis_flushed(redis_url: str) -> Iterator[str]:
    """The session's Redis, emptied before the test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    yield redis_url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis process this test owns, so it may stop and restart it."""
    binary = find_redis_binary()
    if binary is None:
        pytest.skip("no redis-server binary")
    server = RedisServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.stop()
