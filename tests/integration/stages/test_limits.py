"""Limits through a real gateway: one test body over the in-process store and a real Redis."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.keys.hashing import hash_key, new_key
from gateway.stages.limits import month_of
from gateway.stores import Admission, Decision, MemoryStore, RedisStore, Store
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
ADMIN = new_key()
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        return MemoryStore()
    return RedisStore(request.getfixturevalue("redis_flushed"), timeout_s=0.5)


def _gateway(
    tmp_path: Path, upstream: FakeUpstream, store: Store, key: dict[str, Any], **extra: Any
) -> GatewayServer:
    document = fake_policy(upstream.base_url, **extra)
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(KEY), "tenant": "acme", "name": "k", **key},
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
    ]
    return GatewayServer(write_policy(tmp_path / "policy.yaml", document), store=store).start()


def _client(gateway: GatewayServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)


def _usage(gateway: GatewayServer) -> dict[str, Any]:
    return httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}).json()


def _settled(gateway: GatewayServer, num_requests: int, timeout_s: float = 10.0) -> dict[str, Any]:
    """Key k's ledger once it holds ``num_requests``: a request settles after its response is sent."""
    deadline = time.monotonic() + timeout_s
    while True:
        acme = _usage(gateway)["tenants"].get("acme")
        if acme is not None and acme["keys"]["k"]["requests"] >= num_requests:
            return acme
        if time.monotonic() > deadline:
            raise AssertionError(f"key k never settled {num_requests} requests: {acme!r}")
        time.sleep(0.02)


def test_requests_per_minute(tmp_path: Path, upstream: FakeUpstream, store: Store) -> None:
    gateway = _gateway(tmp_path, upstream, store, {"limits": {"requests_per_minute": 3}})
    try:
        client = _client(gateway)
        for expected_remaining in ("2", "1", "0"):
            raw = client.chat.completions.with_raw_response.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-remaining-requests"] == expected_remaining
            assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
        assert info.value.code == "rate_limit_exceeded"
        assert 1 <= int(info.value.response.headers["retry-after"]) <= 61
        assert info.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    finally:
        gateway.stop()


def test_tokens_per_minute_reserve_then_settle_and_the_ledger(
    tmp_path: Path, upstream: FakeUpstream, store: Store
) -> None:
    gateway = _gateway(
        tmp_path,
        upstream,
        store,
        {"limits": {"tokens_per_minute": 100}},
    )
    try:
        client = _client(gateway)
        # each call reserves its prompt (~8 tokens) + 50 and settles to the fake's 11 + 6 = 17
        for i in range(3):
            raw = client.chat.completions.with_raw_response.create(
                model="small",
                messages=MESSAGES,  # type: ignore[arg-type]
                max_tokens=50,
            )
            assert raw.headers["x-ratelimit-limit-tokens"] == "100"
            _settled(gateway, i + 1)  # the next admit must see this reservation settled
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=50)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError) as info:  # can never fit: says so
            client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=500)  # type: ignore[arg-type]
        assert "too large" in info.value.message
        acme = _settled(gateway, 3)
        assert acme["keys"]["k"] == {"requests": 3, "input_tokens": 33, "output_tokens": 18, "cost_usd": 0.0}
        assert acme["pools"]["small"]["input_tokens"] == 33
    finally:
        gateway.stop()


def test_budget_gives_insufficient_quota(tmp_path: Path, upstream: FakeUpstream, store: Store) -> None:
    document_pools = fake_policy(upstream.base_url)["pools"]
    document_pools["small"]["price"] = {"input_per_1k": 1.0, "output_per_1k": 2.0}
    gateway = _gateway(tmp_path, upstream, store, {"budget": {"monthly_usd": 0.01}}, pools=document_pools)
    try:
        client = _client(gateway)
        client.chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
        _settled(gateway, 1)  # budgets count settled spend
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
        assert info.value.code == "insufficient_quota"
        spend = _settled(gateway, 1)["keys"]["k"]["cost_usd"]
        assert spend == pytest.approx((11 * 1.0 + 6 * 2.0) / 1000)
    finally:
        gateway.stop()


def test_concurrency_lease_is_released_when_the_client_leaves(
    tmp_path: Path, upstream: FakeUpstream, store: Store
) -> None:
    gateway = _gateway(tmp_path, upstream, store, {"limits": {"max_concurrent": 1}})
    try:
        body = {"model": "slow", "stream": True, "messages": MESSAGES}
        headers = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(timeout=10) as http:
            with http.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status_code == 200
                chunks = r.iter_bytes()  # keep a reference: a collected iterator closes the stream
                next(chunks)
                second = http.post(
                    gateway.url + "/v1/chat/completions",
                    headers=headers,
                    json={"model": "small", "messages": MESSAGES},
                )
                assert second.status_code == 429
                assert second.json()["error"]["message"].startswith("Rate limit reached for concurrent")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                third = http.post(
                    gateway.url + "/v1/chat/completions",
                    headers=headers,
                    json={"model": "small", "messages": MESSAGES},
                )
                if third.status_code == 200:
                    break
                time.sleep(0.02)
            assert third.status_code == 200
        # the cut stream was settled once, with an estimate: prompt tokens + events relayed
        keys = _settled(gateway, 2)["keys"]["k"]
        assert keys["requests"] == 2 and keys["output_tokens"] >= 7
    finally:
        gateway.stop()


@pytest.mark.parametrize(
    "when",
    [
        (2026, 11, 30, 23, 59, 59),
        (2026, 12, 1, 0, 0, 0),
        (2026, 12, 31, 23, 59, 59),
        (2027, 1, 1, 0, 0, 0),
        (2028, 2, 29, 12, 0, 0),
        (1970, 1, 1, 0, 0, 0),
    ],
)
def test_month_of_is_the_utc_calendar_month(when: tuple[int, ...]) -> None:
    ts = calendar.timegm((*when, 0, 0, 0))
    for offset in (0.0, 0.999):
        assert month_of(ts + offset) == time.strftime("%Y-%m", time.gmtime(ts + offset))


def test_usage_of_a_key_without_limits_is_in_the_ledger(
    tmp_path: Path, upstream: FakeUpstream, store: Store
) -> None:
    gateway = _gateway(tmp_path, upstream, store, {})
    try:
        raw = _client(gateway).chat.completions.with_raw_response.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
        assert "x-ratelimit-limit-requests" not in raw.headers  # nothing limits it
        assert _settled(gateway, 1)["keys"]["k"] == {
            "requests": 1,
            "input_tokens": 11,
            "output_tokens": 6,
            "cost_usd": 0.0,
        }
    finally:
        gateway.stop()


class RecordingStore(MemoryStore):
    """A MemoryStore that keeps every Admission it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.admissions: list[Admission] = []

    async def admit(self, admission: Admission) -> Decision:
        self.admissions.append(admission)
        return await super().admit(admission)


def test_a_lease_is_bounded_by_its_pools_own_request_lifetime(tmp_path: Path, upstream: FakeUpstream) -> None:
    store = RecordingStore()
    small = {"replicas": [{"base_url": upstream.base_url, "model": "echo"}], "timeouts": {"total_s": 7}}
    gateway = _gateway(tmp_path, upstream, store, {"limits": {"max_concurrent": 2}}, pools={"small": small})
    try:
        _client(gateway).chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
        # the pool's total_s (7 s, not the policy-wide 5 s) plus the 60 s margin: renewed up to that
        assert [a.lease_ttl_s for a in store.admissions] == [67.0]
    finally:
        gateway.stop()
