"""Fixtures: each semantic-cache test body runs over the memory log and a real Redis."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from gateway.cache.blobs import RedisBlobs
from gateway.semantic_cache.log import MemorySemanticLog, RedisSemanticLog, SemanticLog


class WallClock:
    """Unix seconds that a test can move forward (Redis stamps records with its own clock, so the
    fake runs at real time plus an offset)."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


class Logs:
    """Makes the logs of several gateways over one store: one shared memory log, or one Redis
    connection per gateway."""

    def __init__(self, kind: str, url: str | None) -> None:
        self.kind = kind
        self.url = url
        self.clock = WallClock()
        self._memory: MemorySemanticLog | None = None
        self.made: list[SemanticLog] = []

    def new(self) -> SemanticLog:
        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemorySemanticLog(wall_clock=self.clock)
            return self._memory
        assert self.url is not None
        log = RedisSemanticLog(RedisBlobs(self.url, timeout_s=2.0))
        self.made.append(log)
        return log


@pytest.fixture(params=["memory", "redis"])
async def logs(request: pytest.FixtureRequest) -> AsyncIterator[Logs]:
    url = request.getfixturevalue("redis_flushed") if request.param == "redis" else None
    made = Logs(request.param, url)
    yield made
    for log in made.made:
        await log.close()
