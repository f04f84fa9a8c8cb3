"""One gateway cut off from Redis by the network, then healed, on hosts of their own.

The hosts are tests/support/netns_cluster.py's: ``redis``, ``engine`` (the fake upstream), ``gw1`` and
``gw2`` (two gateways, one policy, sharing ``redis``). This process is the client, from the bridge.
Every phase uses a key of its own (a 60 s window would carry one phase's count into the next), all with
``requests_per_minute: N`` (credit is granted: N >= 64), a concurrency limit and a budget:

1. healthy: N + EXTRA requests spread over both gateways admit exactly N;
2. cut: iptables in gw1's namespace drops everything to and from Redis (gw1 still reaches its clients
   and the engine; its Redis connections stall, nothing is refused). ``fail_closed``: gw1 answers 503
   ``store_unavailable`` and its ``/readyz`` fails. ``fail_open``: gw1 admits exactly N of its own from
   its local limiter (limits hold per process: docs/limits.md, "Redis down"), ``/readyz`` stays ready.
   Either way gw2, which still reaches Redis, admits exactly N of the same key;
3. heal: the rules go; once gw1 serves a request through Redis again, N + EXTRA requests on a fresh key
   over both gateways admit exactly N. Then no concurrency lease is left in Redis (within 15 s, half a
   lease's 30 s life, so none can have merely expired), and the ledger counts every admitted request
   once: in Redis, or in gw1's fallback for those it admitted (``GET /v1/usage`` adds the two).

The time to detect the cut (gw1's first answer after it) and to recover (the first request gw1 serves
through Redis after healing) is printed; only outer bounds that catch a hang are asserted.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from gateway.keys.hashing import hash_key, new_key
from tests.support.netns_cluster import Cluster, running_cluster, skip_reason, wait_for
from tools.servers.gateway_server import write_policy

pytestmark = pytest.mark.slow

HOLD_S = float(os.environ.get("SORTYARD_PARTITION_HOLD_S", "0"))
"""How long the cut lasts after its requests (measure recovery after long partitions)."""
N = 80
"""Each phase key's requests per minute (credit is granted on limits of 64 and more)."""
EXTRA = 40
"""Requests sent past the limit in each phase."""
MAX_CONCURRENT = 16
TIMEOUT_S = 1.0
"""The store's timeout: generous, so a busy 2-core box never times gw2 out spuriously (it would fall back
or fail and the counts would drift); the cut costs gw1 this much."""
CONCURRENCY = 16
PROMPT, COMPLETION = 11, 6
"""The fake upstream's usage of every answer."""
PHASES = ("healthy", "cut", "healed")
KEYS = {name: new_key() for name in (*PHASES, "probe", "admin")}
BODY = {"model": "small", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
_FALLBACKS = re.compile(r'^sortyard_store_fallbacks_total\{reason="(\w+)"\} ([0-9.e+]+)$', re.M)


def _policy(path: Path, engine_url: str, mode: str) -> Path:
    def key(name: str) -> dict[str, Any]:
        return {
            "sha256": hash_key(KEYS[name]),
            "tenant": "acme",
            "name": name,
            "limits": {"requests_per_minute": N, "max_concurrent": MAX_CONCURRENT},
            "budget": {"monthly_usd": 1000.0},
        }

    probe = {
        "sha256": hash_key(KEYS["probe"]),
        "tenant": "acme",
        "name": "probe",
        "limits": {"requests_per_minute": 100_000, "max_concurrent": 1000},
    }
    admin = {"sha256": hash_key(KEYS["admin"]), "tenant": "ops", "name": "admin", "admin": True}
    document = {
        "version": 1,
        "timeouts": {"connect_s": 1, "first_byte_s": 5, "idle_s": 5, "total_s": 10},
        "pools": {
            "small": {
                "price": {"input_per_1k": 1.0, "output_per_1k": 2.0},
                "replicas": [{"base_url": engine_url, "model": "echo"}],
            }
        },
        "auth": {"required": True},
        "keys": [*(key(name) for name in PHASES), probe, admin],
        "retry": {"max_attempts": 1},
        "store": {"url_env": "SORTYARD_REDIS_URL", "on_failure": mode, "timeout_s": TIMEOUT_S},
        # only the limits store talks to Redis: every Redis wait a request has is the admit's
        "cache": {"response": {"enabled": False}, "affinity": {"enabled": False}},
        "telemetry": {"access_log": False},
    }
    return write_policy(path, document)


# ---- the hosts -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def netns_ok() -> None:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def cluster(netns_ok: None, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    mode: str = request.param
    with running_cluster(tmp_path, lambda url: _policy(tmp_path / "policy.yaml", url, mode)) as cluster:
        yield cluster


# ---- the client ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    url: str
    key: str
    status: int
    code: str | None
    retry_after: str | None
    done_at: float
    """Monotonic time the answer came."""
    elapsed_s: float


async def _send(plan: list[tuple[str, str]], concurrency: int = CONCURRENCY) -> list[Answer]:
    """Each ``(gateway url, key name)`` of ``plan`` once, ``concurrency`` at a time."""
    answers: list[Answer] = []
    todo = iter(plan)
    limits = httpx.Limits(max_connections=2 * concurrency, max_keepalive_connections=2 * concurrency)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as http:

        async def worker() -> None:
            for url, key in todo:
                started = time.monotonic()
                response = await http.post(
                    url + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {KEYS[key]}"}
                )
                code = response.json().get("error", {}).get("code") if response.status_code != 200 else None
                answers.append(
                    Answer(
                        url,
                        key,
                        response.status_code,
                        code,
                        response.headers.get("retry-after"),
                        time.monotonic(),
                        time.monotonic() - started,
                    )
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers


def _statuses(answers: list[Answer], url: str | None = None) -> Counter[int]:
    return Counter(a.status for a in answers if url is None or a.url == url)


def _fallbacks(url: str) -> dict[str, float]:
    """``sortyard_store_fallbacks_total`` by reason (admit, settle) of one gateway."""
    text = httpx.get(url + "/metrics", timeout=10.0).text
    return {reason: float(value) for reason, value in _FALLBACKS.findall(text)}


def _usage(url: str) -> dict[str, dict[str, Any]]:
    """The ledger of tenant acme this month, by key name, as ``url`` answers it."""
    response = httpx.get(
        url + "/v1/usage", headers={"Authorization": f"Bearer {KEYS['admin']}"}, timeout=10.0
    )
    assert response.status_code == 200, response.text
    tenant = response.json()["tenants"].get("acme")
    return {} if tenant is None else dict(tenant["keys"])


def _leases(raw: redis.Redis) -> dict[str, int]:
    """Members of every concurrency set in Redis (``sy:{t:<tenant>}:conc:<scope>``), non-empty ones."""
    sizes = {key: int(raw.zcard(key)) for key in raw.scan_iter("sy:*:conc:*")}
    return {key: size for key, size in sizes.items() if size}


def _readyz(url: str) -> tuple[int, dict[str, Any]]:
    response = httpx.get(url + "/readyz", timeout=10.0)
    return response.status_code, response.json()


def _served_through_redis(cluster: Cluster, mode: str) -> tuple[bool, bool]:
    """One probe request to gw1: (answered 200, served through Redis: no fallback admit counted)."""
    before = _fallbacks(cluster.gw1).get("admit", 0.0)
    [answer] = asyncio.run(_send([(cluster.gw1, "probe")], 1))
    after = _fallbacks(cluster.gw1).get("admit", 0.0)
    if mode == "fail_closed":
        assert answer.status in (200, 503), answer
    else:
        assert answer.status == 200, answer
    return answer.status == 200, answer.status == 200 and after == before


# ---- the test --------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", ["fail_open", "fail_closed"], indirect=True)
def test_a_gateway_cut_off_from_redis_then_healed(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    mode = request.node.callspec.params["cluster"]
    gw1, gw2, net = cluster.gw1, cluster.gw2, cluster.net
    admitted: Counter[str] = Counter()
    """200s per key, both gateways."""
    by_fallback: Counter[str] = Counter()
    """200s per key that gw1's local limiter admitted."""

    # 1. healthy: both gateways share the key's limit
    answers = asyncio.run(_send([((gw1, gw2)[i % 2], "healthy") for i in range(N + EXTRA)]))
    assert _statuses(answers) == {200: N, 429: EXTRA}, cluster.log_tails()
    admitted["healthy"] += N

    # 2. cut gw1 off from Redis (not from its clients, nor from the engine)
    fallbacks_before = _fallbacks(gw1)
    cut_at = time.monotonic()
    net.cut("gw1", "redis")
    plan = [(url, "cut") for _ in range(N + EXTRA) for url in (gw1, gw2)]
    answers = asyncio.run(_send(plan, 2 * CONCURRENCY))
    on_gw1 = [a for a in answers if a.url == gw1]
    detect_s = min(a.done_at for a in on_gw1) - cut_at
    slowest_s = max(a.elapsed_s for a in on_gw1)
    num_slow = sum(a.elapsed_s > 1.5 * TIMEOUT_S for a in on_gw1)
    assert _statuses(answers, gw2) == {200: N, 429: EXTRA}, "gw2 still limits exactly"
    if mode == "fail_closed":
        assert _statuses(answers, gw1) == {503: N + EXTRA}
        assert {(a.code, a.retry_after is not None) for a in on_gw1} == {("store_unavailable", True)}
        status, ready = _readyz(gw1)
        assert status == 503 and ready["checks"]["store"] is False, ready  # out of the load balancer
    else:
        assert _statuses(answers, gw1) == {200: N, 429: EXTRA}, "gw1 limits by itself"
        fallbacks = _fallbacks(gw1)
        assert fallbacks["admit"] - fallbacks_before.get("admit", 0.0) == N + EXTRA  # every admit
        status, ready = _readyz(gw1)
        assert status == 200 and ready["checks"]["store"] is False, ready  # serving: stays in
        by_fallback["cut"] += N
        admitted["cut"] += N  # gw1's
    admitted["cut"] += N  # gw2's
    # no request hangs on the stalled store (an outer bound: one store timeout is the promise)
    assert slowest_s < 2 * TIMEOUT_S + 3.0, slowest_s
    time.sleep(HOLD_S)  # the scenario's own length: a longer cut, past the connections' TCP_USER_TIMEOUT

    # 3. heal, and wait for gw1 to serve a request through Redis
    healed_at = time.monotonic()
    net.heal("gw1", "redis")
    recovered = False
    while not recovered:
        assert time.monotonic() - healed_at < 60, "gw1 never served through Redis again"
        ok, recovered = _served_through_redis(cluster, mode)
        if ok:
            admitted["probe"] += 1
            by_fallback["probe"] += 0 if recovered else 1
        if not recovered:
            time.sleep(0.05)  # the poll's interval
    recover_s = time.monotonic() - healed_at
    ready_s = wait_for(lambda: _readyz(gw1)[0] == 200, "gw1 ready again", 60)

    # limits are exact across both gateways again
    answers = asyncio.run(_send([((gw1, gw2)[i % 2], "healed") for i in range(N + EXTRA)]))
    assert _statuses(answers) == {200: N, 429: EXTRA}, cluster.log_tails()
    admitted["healed"] += N

    # nothing leaks: every lease (and spare slot) given back well before any could expire (30 s)
    leases_s = wait_for(lambda: not _leases(cluster.raw), "every lease released", 15, 0.05)
    # the ledger counts every admitted request once: gw2 answers Redis's, gw1 adds its fallback's
    assert _fallbacks(gw2) == {}, "gw2 never fell back"
    in_redis = {key: admitted[key] - by_fallback[key] for key in admitted}

    def ledger_is(url: str, expected: dict[str, int]) -> bool:
        got = {key: entry["requests"] for key, entry in _usage(url).items()}
        return got == {key: count for key, count in expected.items() if count}

    wait_for(lambda: ledger_is(gw2, in_redis), f"Redis's ledger is {in_redis}", 15, 0.05)
    wait_for(lambda: ledger_is(gw1, dict(admitted)), f"gw1's ledger is {dict(admitted)}", 15, 0.05)
    for key, entry in _usage(gw1).items():  # settled from the real usage, priced, wherever admitted
        requests = admitted[key]
        assert (entry["requests"], entry["input_tokens"], entry["output_tokens"]) == (
            requests,
            PROMPT * requests,
            COMPLETION * requests,
        )
        assert entry["cost_usd"] == pytest.approx(requests * (PROMPT * 1.0 + COMPLETION * 2.0) / 1000)
    assert _leases(cluster.raw) == {}

    print(
        f"\n[{mode}] cut detected (gw1's first answer) after {detect_s:.2f} s; slowest gw1 answer "
        f"during the cut {slowest_s:.2f} s ({num_slow} over 1.5 timeouts); after healing, gw1 served "
        f"through Redis again after {recover_s:.2f} s, ready {ready_s:.2f} s later; leases all "
        f"released {leases_s:.2f} s after the last burst; fallback-admitted {dict(by_fallback)}"
    )
