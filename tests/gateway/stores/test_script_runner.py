"""ScriptRunner on a real Redis: scripts by SHA1 (loaded again on NOSCRIPT), one EVALSHA per batch of
calls with the same keys, every call bounded by the timeout and every caller answered."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.redis_client.commands import RespCommands
from gateway.redis_client.resp import RespClient
from gateway.stores import Admission, LimitRule, RedisStore, StoreUnavailable
from gateway.stores.key_layouts import KeyLayouts
from gateway.stores.key_names import KeySpace
from gateway.stores.lua_codec import admit_spec, read_admit_reply
from gateway.stores.script_runner import LuaScript, ScriptRunner
from tests.gateway.stores.conftest import T0, admission, settlement
from tests.support.loop_stall import block_after_write
from tools.servers.redis_server import RedisServer

ALL_KINDS = LimitRule(scope="key:k1", requests_per_minute=10, tokens_per_minute=1000, max_concurrent=3)
TEN_A_MINUTE = LimitRule(scope="key:k1", requests_per_minute=10)
ADMIT = LuaScript("admit.lua")
LAYOUTS = KeyLayouts(KeySpace())


class CountingClient(RespClient):
    """A RespClient that records the name of every command it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[str] = []

    async def execute(self, *args: Any) -> Any:
        self.sent.append(args[0])
        return await super().execute(*args)


@pytest.fixture
async def fast(redis_flushed: str) -> AsyncIterator[tuple[ScriptRunner, CountingClient]]:
    client = RespCommands.from_url(redis_flushed)
    counting = CountingClient(redis_flushed)
    yield ScriptRunner(client, counting, timeout_s=2.0), counting
    await counting.close()
    await client.close()


def _admit_call(adm: Admission) -> tuple[list[str], bytes]:
    key_names, checks = LAYOUTS.admit(adm.tenant, adm.month, adm.rules)
    return key_names, admit_spec(adm, checks, lease_expiry_s=30.0, want=None)


async def test_a_script_is_called_by_the_sha1_redis_gives_it(redis_flushed: str) -> None:
    client = aioredis.Redis.from_url(redis_flushed)
    try:
        for name in ("admit.lua", "settle.lua", "flush.lua"):
            script = LuaScript(name)
            assert await client.script_load(script.source) == script.sha
    finally:
        await client.aclose()


async def test_calls_with_the_same_keys_in_one_loop_turn_share_one_evalsha(
    fast: tuple[ScriptRunner, CountingClient],
) -> None:
    runner, counting = fast
    await runner.run(ADMIT, *_admit_call(admission(TEN_A_MINUTE, now_s=T0, tenant="warm")))  # loads it
    counting.sent.clear()
    admissions = [admission(TEN_A_MINUTE, now_s=T0) for _ in range(16)]
    replies = await asyncio.gather(*(runner.run(ADMIT, *_admit_call(adm)) for adm in admissions))
    assert counting.sent == ["EVALSHA"]
    # answered in turn, atomically: the first ten fill the limit
    allowed = [
        read_admit_reply(reply, adm)[0].allowed for reply, adm in zip(replies, admissions, strict=True)
    ]
    assert allowed == [True] * 10 + [False] * 6


async def test_calls_with_other_keys_go_in_their_own_evalsha(
    fast: tuple[ScriptRunner, CountingClient],
) -> None:
    runner, counting = fast
    await runner.run(ADMIT, *_admit_call(admission(TEN_A_MINUTE, now_s=T0, tenant="warm")))
    counting.sent.clear()
    calls = [_admit_call(admission(TEN_A_MINUTE, now_s=T0, tenant=t)) for t in ("acme", "globex") * 3]
    await asyncio.gather(*(runner.run(ADMIT, *call) for call in calls))
    assert counting.sent == ["EVALSHA", "EVALSHA"]


async def test_a_queued_call_runs_without_a_fast_connection(redis_flushed: str) -> None:
    client = RespCommands.from_url(redis_flushed)
    try:
        runner = ScriptRunner(client, None, timeout_s=2.0)
        adm = admission(TEN_A_MINUTE, now_s=T0)
        decision, _, _ = read_admit_reply(await runner.run_soon(ADMIT, *_admit_call(adm)), adm)
        assert decision.allowed and decision.remaining_requests == 9
    finally:
        await client.close()


async def test_a_batch_that_fails_answers_every_caller() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{probe.getsockname()[1]}"
    client, fast = RespCommands.from_url(url), RespClient(url, connect_timeout_s=0.5)
    try:
        runner = ScriptRunner(client, fast, timeout_s=0.5)
        calls = [_admit_call(admission(TEN_A_MINUTE, now_s=T0)) for _ in range(5)]
        results = await asyncio.gather(*(runner.run(ADMIT, *call) for call in calls), return_exceptions=True)
        assert all(isinstance(result, StoreUnavailable) for result in results), results
    finally:
        await fast.close()
        await client.close()


async def test_scripts_are_reloaded_after_a_script_flush(
    redis_stores: Callable[..., RedisStore], redis_flushed: str
) -> None:
    store = redis_stores()
    assert (await store.admit(admission(ALL_KINDS, now_s=T0))).allowed
    client = aioredis.Redis.from_url(redis_flushed)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    assert (await store.admit(admission(ALL_KINDS, now_s=T0 + 1))).allowed


async def test_a_client_passed_in_reloads_scripts_after_a_script_flush(redis_flushed: str) -> None:
    client = RespCommands.from_url(redis_flushed)
    store = RedisStore(client, timeout_s=2.0)
    try:
        assert (await store.admit(admission(ALL_KINDS, now_s=T0))).allowed
        await client.resp.execute("SCRIPT", "FLUSH")
        assert (await store.admit(admission(ALL_KINDS, now_s=T0 + 1))).allowed
    finally:
        await client.close()


async def test_a_hung_redis_costs_at_most_the_timeout(own_redis: RedisServer) -> None:
    store = RedisStore(own_redis.url, timeout_s=0.1)
    assert own_redis.proc is not None
    try:
        assert (await store.admit(admission(ALL_KINDS, now_s=T0))).allowed
        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            # a frozen Redis never answers: each call ends only because the store's own timeout cuts it
            # (the outer bound just fails the test fast if it did not)
            async with asyncio.timeout(10):
                with pytest.raises(StoreUnavailable):
                    await store.admit(admission(ALL_KINDS, now_s=T0 + 1))
                with pytest.raises(StoreUnavailable):
                    await store.settle(settlement(admission(ALL_KINDS, now_s=T0 + 1)))
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        # back without a restart: a resumed Redis first works through what the cut calls left queued,
        # which on a busy machine can take longer than 0.1 s, so wait for the condition, not a guess
        async with asyncio.timeout(10):
            while True:
                try:
                    decision = await store.admit(admission(ALL_KINDS, now_s=T0 + 2))
                    break
                except StoreUnavailable:
                    await asyncio.sleep(0.05)
        assert decision.allowed  # and what the cut calls took was given back
    finally:
        await store.close()


async def test_a_loop_blocked_past_the_timeout_fails_no_call_redis_answers(redis_flushed: str) -> None:
    """The calls in flight are answered: a StoreUnavailable would open a fail_closed store's circuit,
    a second of 503s for one stall of the gateway's own loop."""
    client, fast = RespCommands.from_url(redis_flushed), RespClient(redis_flushed)
    try:
        runner = ScriptRunner(client, fast, timeout_s=0.2)
        await runner.run(ADMIT, *_admit_call(admission(TEN_A_MINUTE, now_s=T0, tenant="warm")))  # loads it
        block_after_write(fast, 0.6)  # three timeouts, the replies waiting in the socket
        calls = [_admit_call(admission(TEN_A_MINUTE, now_s=T0)) for _ in range(2)]
        replies = await asyncio.gather(*(runner.run(ADMIT, *call) for call in calls))
        decisions = [read_admit_reply(reply, admission(TEN_A_MINUTE, now_s=T0))[0] for reply in replies]
        assert [decision.allowed for decision in decisions] == [True, True]
    finally:
        await fast.close()
        await client.close()
