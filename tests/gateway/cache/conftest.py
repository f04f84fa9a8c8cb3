"""Fixtures for the cache tests: one test body runs over the memory twin and a real Redis."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from gateway.cache import Blobs, MemoryBlobs, RedisBlobs


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Events(Counter[str]):
    """A metric hook that counts what it is told."""

    def __call__(self, name: str, n: int = 1) -> None:
        self[name] += n


class Backend:
    """Makes Blobs of one kind and moves time for them: a fake clock in memory; in Redis, every key's
    time to live shortened by the same amount (what Redis would see had that time passed), so expiry is
    tested without sleeping and without racing a real clock."""

    def __init__(self, kind: str, url: str | None) -> None:
        self.kind = kind
        self.url = url
        self.clock = FakeClock()
        self.events = Events()
        self._made: list[Blobs] = []

    def blobs(self, **kwargs: Any) -> Blobs:
        made: Blobs
        if self.kind == "memory":
            kwargs.setdefault("on_event", self.events)
            made = MemoryBlobs(clock=self.clock, **kwargs)
        else:
            assert self.url is not None
            kwargs.setdefault("on_event", self.events)
            kwargs.setdefault("timeout_s", 2.0)  # generous: these tests check semantics, not latency
            made = RedisBlobs(self.url, **kwargs)
        self._made.append(made)
        return made

    async def advance(self, seconds: float) -> None:
        if self.kind == "memory":
            self.clock.now += seconds
            return
        assert self.url is not None
        client = redis.asyncio.Redis.from_url(self.url)
        try:
            elapsed_ms = round(seconds * 1000)
            for key in await client.keys("*"):
                left_ms = await client.pttl(key)
                if left_ms < 0:  # no expiry (or already gone): time does not touch it
                    continue
                if left_ms <= elapsed_ms:
                    await client.delete(key)
                else:
                    await client.pexpire(key, left_ms - elapsed_ms)
        finally:
            await client.aclose()

    async def close(self) -> None:
        for blobs in self._made:
            await blobs.close()


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """Each storage kind in turn; the Redis one on the session's real Redis, flushed."""
    url = request.getfixturevalue("redis_flushed") if request.param == "redis" else None
    made = Backend(request.param, url)
    yield made
    await made.close()
