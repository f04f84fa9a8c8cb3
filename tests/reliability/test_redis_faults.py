"""Redis stalls (SIGSTOP) or dies under load: no lease, credit or settle is lost or leaks.

A real gateway with a Redis this test owns and a fake upstream whose ``slow-echo`` answers after
300 ms, so requests are in flight when Redis goes away. For each failure mode, with and without
local credit: 24 clients send requests back to back, Redis is frozen (or killed, then started again
empty) for 1.5 s, the clients stop. Once Redis answers and the gateway has settled, the key's
concurrency set is empty, the gateway holds no credit and owes Redis nothing, the ledger counts every
answered request once, and a burst of ``max_concurrent`` requests is admitted in full.

The clients run in a process of their own: sharing the gateway's GIL, a burst of them could hold its
event loop past the store's 0.2 s timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import redis

from gateway.keys.hashing import hash_key
from gateway.stages.limits import month_of
from gateway.stores import CreditStore, FailoverStore, RedisStore, StoreUnavailable, UsageReport
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy
from tools.servers.redis_server import RedisServer

pytestmark = pytest.mark.slow

KEY = "sk-sy-faults-0123456789abcdef0123456789abcdef"
"""The clients' key (a constant: the client process imports this module afresh)."""
URL_ENV = "SORTYARD_TEST_FAULTS_REDIS_URL"
MAX_CONCURRENT = 64
NUM_CLIENTS = 24
LEASES = "sy:{t:acme}:conc:key:k"
"""The key's concurrency set (gateway/stores/key_names.py: ``sy:{t:<tenant>}:conc:<scope>``)."""
OUTAGE_S = 1.5
SLOW_ECHO_S = 0.3
T = TypeVar("T")


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def clients() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One client process for the module, started (its imports done) before a test times anything."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_client_process, "http://127.0.0.1:9", 0, None).result(timeout=120)  # imports this module
        yield pool


def _policy(upstream: FakeUpstream, mode: str, local_credit: bool) -> dict[str, Any]:
    document = fake_policy(upstream.base_url)
    # bursts of 64 open as many upstream connections at once: on a loaded 2-core machine a 1 s connect
    # bound (the fake policy's) can run out, a 502 this test is not about; Redis is what it breaks
    document["timeouts"] = {"connect_s": 10, "first_byte_s": 10, "idle_s": 10, "total_s": 30}
    document["pools"]["slow"] = {"replicas": [{"base_url": upstream.base_url, "model": "slow-echo"}]}
    document["auth"] = {"required": True}
    document["keys"] = [
        {
            "sha256": hash_key(KEY),
            "tenant": "acme",
            "name": "k",
            "limits": {
                "max_concurrent": MAX_CONCURRENT,
                # never reached here: they put the windows (and their credit) on every request's path
                "requests_per_minute": 100_000,
                "tokens_per_minute": 10_000_000,
            },
        },
    ]
    document["store"] = {
        "url_env": URL_ENV,
        "on_failure": mode,
        "timeout_s": 0.2,  # a frozen Redis costs a call this long, then the circuit opens
        "local_credit": local_credit,
    }
    document["cache"] = {"response": {"enabled": False}, "affinity": {"enabled": False}}
    document["telemetry"] = {"access_log": False}
    return document


def _client_process(url: str, num_clients: int, stop_file: str | None) -> list[tuple[float, int]]:
    """In the client process: ``num_clients`` clients send requests back to back until ``stop_file``
    exists (or one request each when it is None). Returns each answer's (monotonic time it was sent,
    status); CLOCK_MONOTONIC is the same in every process."""

    async def one(client: httpx.AsyncClient, i: int) -> tuple[float, int]:
        sent_at = time.monotonic()
        body = {"model": "slow", "messages": [{"role": "user", "content": f"request {i}"}], "max_tokens": 16}
        response = await client.post("/v1/chat/completions", json=body)
        return sent_at, response.status_code

    async def main() -> list[tuple[float, int]]:
        limits = httpx.Limits(max_connections=num_clients, max_keepalive_connections=num_clients)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10.0, limits=limits) as client:
            if stop_file is None:
                return list(await asyncio.gather(*(one(client, i) for i in range(num_clients))))
            answers: list[tuple[float, int]] = []
            numbers = iter(range(1_000_000))

            async def worker() -> None:
                while not os.path.exists(stop_file):  # noqa: ASYNC240 (a stat per request: cheap)
                    answers.append(await one(client, next(numbers)))

            await asyncio.gather(*(worker() for _ in range(num_clients)))
            return answers

    return asyncio.run(main())


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def _load_through_outage(
    server: GatewayServer,
    upstream: FakeUpstream,
    own_redis: RedisServer,
    clients: concurrent.futures.ProcessPoolExecutor,
    outage: str,
    stop_file: Path,
) -> tuple[float, list[tuple[float, int]]]:
    """The load, with Redis away for OUTAGE_S in its middle. Returns a moment (monotonic) by which
    Redis was gone, and every answer.

    That moment is taken once the signal is sent (SIGKILL: once the process is reaped), never
    before: on a loaded machine this thread can wait a few hundred milliseconds for the CPU or the
    GIL between a clock read and the signal, while the gateway's loop settles requests in a Redis
    that is still up."""
    assert own_redis.proc is not None
    before = len(upstream.requests)
    load = clients.submit(_client_process, server.url, NUM_CLIENTS, str(stop_file))
    # leases, credit and settles in Redis, and requests in flight
    _wait_for(lambda: len(upstream.requests) >= before + 2 * NUM_CLIENTS, "the load started")
    if outage == "frozen":
        own_redis.proc.send_signal(signal.SIGSTOP)
    else:
        own_redis.stop()
    gone_by = time.monotonic()
    time.sleep(OUTAGE_S)  # the outage's length
    if outage == "frozen":
        own_redis.proc.send_signal(signal.SIGCONT)
    else:
        own_redis.start()  # same port, empty
    resumed = len(upstream.requests)
    _wait_for(lambda: len(upstream.requests) >= resumed + NUM_CLIENTS, "the load went on after the outage")
    stop_file.touch()
    return gone_by, load.result(timeout=30)


def _on_gateway(server: GatewayServer, make: Callable[[], Awaitable[T]], timeout_s: float = 10.0) -> T:
    """Run ``make()`` on the gateway's own event loop (its store is not thread-safe)."""
    assert server.loop is not None

    async def call() -> T:
        return await make()

    return asyncio.run_coroutine_threadsafe(call(), server.loop).result(timeout_s)


def _wait_for_redis(raw: redis.Redis) -> None:
    def answers() -> bool:
        try:
            return bool(raw.ping())
        except redis.RedisError:
            return False

    _wait_for(answers, "Redis answered again")


def _settle(server: GatewayServer, timeout_s: float = 10.0) -> None:
    """``gateway.settle()`` once the store takes writes again (while its circuit is open it refuses)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            server.settle()
            return
        except StoreUnavailable:
            assert time.monotonic() < deadline, "the store never took the gateway's writes"
            time.sleep(0.05)


def _settle_once_credit_is_spent(server: GatewayServer) -> None:
    """Settle once the second of the last admit is over and spare slots have been idle longer than
    CreditStore keeps them (0.25 s, on time.time): then it must hold no credit at all."""
    ready_at = max(math.floor(time.time()) + 1.0, time.time() + 0.3)
    while (left := ready_at - time.time()) > 0:
        time.sleep(left)
    _settle(server)


def _held_back(store: Any) -> dict[str, Any]:
    """What a store still holds back: kept settles, writes Redis has not taken, credit, leases held."""
    state: dict[str, Any] = {}
    if isinstance(store, FailoverStore):
        state["kept settles"] = list(store._unsettled)
        state.update(_held_back(store.primary))
    elif isinstance(store, CreditStore):
        state["window credit"] = dict(store._credit.windows)
        state["spare slots"] = dict(store._credit.slots)
        state["held leases"] = len(store._leases)
        state["owed writes"] = store._writes.owed()
    elif isinstance(store, RedisStore):
        state["held leases"] = len(store._leases)
        state["owed writes"] = store._writes.owed()
    return {name: value for name, value in state.items() if value}


def _requests_of_key(report: UsageReport) -> int:
    acme = report.tenants.get("acme")
    return 0 if acme is None or "k" not in acme.keys else acme.keys["k"].requests


def _fallback_admits(server: GatewayServer) -> float:
    value = server.gateway.metrics.registry.get_sample_value(
        "sortyard_store_fallbacks_total", {"reason": "admit"}
    )
    return value or 0.0


@pytest.mark.parametrize("local_credit", [True, False], ids=["credit", "no_credit"])
@pytest.mark.parametrize("outage", ["frozen", "stopped"])
@pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
def test_nothing_leaks_after_a_redis_outage_under_load(
    tmp_path: Path,
    upstream: FakeUpstream,
    own_redis: RedisServer,
    clients: concurrent.futures.ProcessPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    outage: str,
    local_credit: bool,
) -> None:
    monkeypatch.setenv(URL_ENV, own_redis.url)
    server = GatewayServer(
        write_policy(tmp_path / "policy.yaml", _policy(upstream, mode, local_credit))
    ).start()
    raw = redis.Redis.from_url(own_redis.url, decode_responses=True)
    try:
        gone_by, answers = _load_through_outage(
            server, upstream, own_redis, clients, outage, tmp_path / "stop"
        )
        statuses = [status for _, status in answers]
        assert set(statuses) <= {200, 503}, statuses
        if mode == "fail_closed":
            assert 503 in statuses  # the outage was seen
        _wait_for_redis(raw)
        _settle_once_credit_is_spent(server)
        store = server.gateway.store
        assert isinstance(store, FailoverStore)

        # no lease left behind: every request admitted in Redis released its own (and its spare slots)
        assert raw.zrange(LEASES, 0, -1, withscores=True) == []
        # every answered request is in the ledger once: in Redis, or in the fallback for those it admitted
        month = month_of(time.time())
        in_redis = _requests_of_key(_on_gateway(server, lambda: store.primary.usage(month)))
        in_fallback = _requests_of_key(_on_gateway(server, lambda: store.fallback.usage(month)))
        assert in_fallback == _fallback_admits(server)  # a request Redis admitted never settles there
        answered = statuses.count(200)
        if outage == "frozen":
            assert in_redis + in_fallback == answered
        else:
            # Redis came back empty, so it lacks what was settled before it died, but has all the rest:
            # a request sent less than SLOW_ECHO_S before Redis was gone was answered, and settled,
            # after it died
            late = sum(
                1 for sent_at, status in answers if status == 200 and sent_at > gone_by - SLOW_ECHO_S + 0.05
            )
            assert late <= in_redis + in_fallback <= answered

        # nothing held back: no kept settle, no write Redis has not taken, no credit, no lease held
        assert _on_gateway(server, lambda: asyncio.sleep(0, _held_back(store))) == {}

        # the next burst gets every slot of the limit, and gives them all back
        burst = clients.submit(_client_process, server.url, MAX_CONCURRENT, None).result(timeout=30)
        assert [status for _, status in burst] == [200] * MAX_CONCURRENT
        _settle_once_credit_is_spent(server)
        assert raw.zcard(LEASES) == 0
    finally:
        if own_redis.proc is not None:
            own_redis.proc.send_signal(signal.SIGCONT)
        raw.close()
        server.stop()
