"""RespCommands on a real Redis: reply shapes, scripts, SCAN, pipelining, and a Redis that goes away."""

from __future__ import annotations

import asyncio
import hashlib
import signal
from collections.abc import AsyncIterator

import pytest

from gateway.redis_client.commands import RespCommands
from gateway.redis_client.resp import RespClient, RespError
from tools.servers.redis_server import RedisServer

ECHO = "return {KEYS[1], ARGV[1]}"
ECHO_SHA = hashlib.sha1(ECHO.encode()).hexdigest()


@pytest.fixture
async def redis(redis_flushed: str) -> AsyncIterator[RespCommands]:
    client = RespCommands.from_url(redis_flushed)
    yield client
    await client.close()


async def test_get_set_mget_delete(redis: RespCommands) -> None:
    assert await redis.get("k1") is None
    assert await redis.set("k1", b"\x00bytes\xff") is True
    assert await redis.set("k2", "text") is True
    assert await redis.get("k1") == b"\x00bytes\xff"
    assert await redis.mget(["k1", "missing", "k2"]) == [b"\x00bytes\xff", None, b"text"]
    assert await redis.delete("k1", "k2", "missing") == 2
    assert await redis.mget(["k1", "k2"]) == [None, None]


async def test_set_with_px_expires_and_nx_keeps_the_first(redis: RespCommands) -> None:
    assert await redis.set("lock", "a", nx=True, px=60_000) is True
    assert await redis.set("lock", "b", nx=True, px=60_000) is False
    assert await redis.get("lock") == b"a"
    assert 0 < await redis.resp.execute("PTTL", "lock") <= 60_000
    assert await redis.set("short", "x", px=30) is True
    await asyncio.sleep(0.1)
    assert await redis.get("short") is None


async def test_evalsha_loads_the_script_on_noscript(redis: RespCommands) -> None:
    await redis.resp.execute("SCRIPT", "FLUSH")
    assert await redis.evalsha(ECHO_SHA, ECHO, ["k"], "v") == [b"k", b"v"]
    assert await redis.evalsha(ECHO_SHA, ECHO, ["k2"], 7) == [b"k2", b"7"]  # loaded now


async def test_evalsha_passes_other_error_replies_on(redis: RespCommands) -> None:
    failing = "return redis.call('INCR', KEYS[1])"
    await redis.set("text", "not a number")
    with pytest.raises(RespError, match="not an integer"):
        await redis.evalsha(hashlib.sha1(failing.encode()).hexdigest(), failing, ["text"])


async def test_scan_iter_walks_every_matching_key_across_cursors(redis: RespCommands) -> None:
    await asyncio.gather(*(redis.set(f"sy:{{t:{i}}}:usage:2026-11", "1") for i in range(250)))
    await redis.set("other", "1")
    found = [key async for key in redis.scan_iter(match="sy:*:usage:2026-11", count=10)]
    assert sorted(found) == sorted(f"sy:{{t:{i}}}:usage:2026-11".encode() for i in range(250))
    everything = {key async for key in redis.scan_iter()}
    assert len(everything) == 251


async def test_hgetall_is_a_dict_and_empty_for_a_missing_key(redis: RespCommands) -> None:
    await redis.resp.execute("HSET", "h", "requests", 3, "cost", "0.25")
    assert await redis.hgetall("h") == {b"requests": b"3", b"cost": b"0.25"}
    assert await redis.hgetall("missing") == {}
    await redis.set("s", "x")
    with pytest.raises(RespError, match="WRONGTYPE"):
        await redis.hgetall("s")


async def test_calls_gathered_in_one_loop_turn_leave_in_one_write(redis: RespCommands) -> None:
    assert await redis.ping()  # connected
    assert isinstance(redis.resp, RespClient)
    protocol = redis.resp._protocol
    assert protocol is not None
    writes: list[bytes] = []
    write = protocol.transport.write

    def recording_write(data: bytes) -> None:
        writes.append(data)
        write(data)

    protocol.transport.write = recording_write
    try:
        replies = await asyncio.gather(redis.set("a", "1"), redis.set("b", "2"), redis.mget(["a", "b"]))
    finally:
        protocol.transport.write = write
    assert replies == [True, True, [b"1", b"2"]]
    assert len(writes) == 1


async def test_a_stopped_redis_raises_connection_error_and_the_next_call_reconnects(
    own_redis: RedisServer,
) -> None:
    redis = RespCommands.from_url(own_redis.url, connect_timeout_s=0.2)
    try:
        assert await redis.set("k", "v")
        own_redis.stop()
        with pytest.raises(ConnectionError):
            await redis.get("k")
        with pytest.raises(ConnectionError):  # refused
            await redis.ping()
        own_redis.start()  # same port, empty
        assert await redis.ping()
        assert await redis.get("k") is None
    finally:
        await redis.close()


async def test_a_caller_that_timed_out_does_not_shift_the_replies_of_later_calls(
    own_redis: RedisServer,
) -> None:
    redis = RespCommands.from_url(own_redis.url)
    assert own_redis.proc is not None
    try:
        await asyncio.gather(redis.set("a", "1"), redis.set("b", "2"))
        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await redis.get("a")  # its reply comes later, to nobody
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        assert await redis.get("b") == b"2"
        assert await redis.get("a") == b"1"
    finally:
        await redis.close()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_connection_is_dropped_when_redis_stops_acknowledging(redis_flushed: str, loop_kind: str) -> None:
    """TCP_USER_TIMEOUT on every connection (the gateway runs on uvloop, tests on asyncio): after a
    partition the next call connects afresh instead of waiting out TCP's doubling retransmits."""
    import socket

    import uvloop

    from gateway.redis_client.resp import TCP_USER_TIMEOUT_MS

    async def set_option() -> int:
        client = RespClient(redis_flushed)
        try:
            assert await client.execute("PING") == b"PONG"
            protocol = client._protocol
            assert protocol is not None
            sock = protocol.transport.get_extra_info("socket")
            return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))
        finally:
            await client.close()

    run = uvloop.run if loop_kind == "uvloop" else asyncio.run
    assert run(set_option()) == TCP_USER_TIMEOUT_MS
