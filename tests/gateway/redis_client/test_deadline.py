"""Deadline on a real Redis: a loop blocked past the bound (a GC pass, a starved process) fails no call
Redis answered, and a Redis that does not answer still ends the call.

Each stall blocks the loop for several times the bound and until Redis's reply is in the socket
(``tests/support/loop_stall.py``): the thing under test, never a guess at how long Redis takes.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from gateway.redis_client.deadline import Deadline
from gateway.redis_client.resp import RespClient
from tests.support.loop_stall import block_after_write
from tools.servers.redis_server import RedisServer

BOUND_S = 0.2
STALL_S = 0.6


async def test_a_reply_that_came_while_the_loop_was_blocked_is_no_timeout(redis_url: str) -> None:
    client = RespClient(redis_url)
    try:
        assert await client.execute("PING") == b"PONG"  # connected
        block_after_write(client, STALL_S)  # the loop blocked past the bound, the reply waiting
        async with Deadline(BOUND_S):
            assert await client.execute("PING") == b"PONG"
    finally:
        await client.close()


async def test_a_call_that_gets_no_answer_ends_at_the_bound(own_redis: RedisServer) -> None:
    client = RespClient(own_redis.url)
    assert own_redis.proc is not None
    try:
        assert await client.execute("PING") == b"PONG"
        own_redis.proc.send_signal(signal.SIGSTOP)
        async with asyncio.timeout(30):  # fails the test fast if the call were held forever
            with pytest.raises(TimeoutError):
                async with Deadline(BOUND_S):
                    await client.execute("PING")
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
        await client.close()


async def test_a_blocked_loop_moves_the_bound_once(own_redis: RedisServer) -> None:
    client = RespClient(own_redis.url)
    assert own_redis.proc is not None
    try:
        assert await client.execute("PING") == b"PONG"
        own_redis.proc.send_signal(signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        stalls: list[asyncio.Handle] = []

        def stall_again() -> None:  # the loop blocked past every deadline, again and again
            time.sleep(STALL_S)
            stalls.append(loop.call_soon(stall_again))

        stalls.append(loop.call_soon(stall_again))
        try:
            async with asyncio.timeout(30):  # fails the test fast if the call were held forever
                with pytest.raises(TimeoutError):
                    async with Deadline(BOUND_S):
                        await client.execute("PING")
        finally:
            stalls[-1].cancel()
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
        await client.close()


async def test_a_block_that_runs_past_the_bound_raises_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        async with Deadline(0.01):
            await asyncio.Event().wait()  # never set


async def test_a_block_that_finishes_in_time_is_left_alone() -> None:
    async with Deadline(30):
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # no cancellation left pending on the task


async def test_an_outer_cancellation_is_never_turned_into_a_timeout() -> None:
    entered = asyncio.Event()

    async def call() -> None:
        async with Deadline(30):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(call())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
