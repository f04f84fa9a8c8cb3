"""gateway/cache/redis_guard.py: an outage opens the circuit; an error reply about one call does not."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest

from gateway.cache.redis_guard import RedisGuard
from gateway.redis_client.resp import RespError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def guard(events: list[str], clock: Clock) -> RedisGuard:
    return RedisGuard(
        timeout_s=1.0, retry_interval_s=5.0, on_event=lambda name, n=1: events.append(name), clock=clock
    )


async def answer() -> str:
    return "value"


def failing(error: Exception) -> Callable[[], Awaitable[str]]:
    async def operation() -> str:
        raise error

    return operation


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError("reset"),
        TimeoutError(),
        RespError("LOADING Redis is loading the dataset in memory"),
        RespError("READONLY You can't write against a read only replica."),
        RespError("OOM command not allowed when used memory > 'maxmemory'."),
    ],
)
async def test_an_outage_opens_the_circuit_until_the_retry_interval(error: Exception) -> None:
    events: list[str] = []
    clock = Clock()
    redis = guard(events, clock)
    assert await redis.run(failing(error), "miss") == "miss" and redis.is_down
    assert await redis.run(answer, "miss") == "miss"  # skipped: the circuit is open
    clock.now = 5.0
    assert await redis.run(answer, "miss") == "value" and not redis.is_down
    assert events == ["error", "error"]


async def test_an_error_reply_about_one_call_fails_that_call_only(caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    redis = guard(events, Clock())
    wrongtype = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
    with caplog.at_level(logging.WARNING, logger="sortyard.cache"):
        for _ in range(3):
            assert await redis.run(failing(wrongtype), "miss") == "miss"
        assert await redis.run(failing(RespError("ERR Invalid stream ID")), "miss") == "miss"
    assert not redis.is_down
    assert await redis.run(answer, "miss") == "value"  # Redis is up: the next call goes through
    assert events == ["error"] * 4
    assert [r.getMessage().split(": ", 2)[-1][:12] for r in caplog.records] == [
        "RespError('W",
        "RespError('E",
    ]
    assert all("refused" in r.getMessage() for r in caplog.records)
