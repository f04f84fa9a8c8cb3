"""Cross-pool fallback end to end: a pool whose replica is down falls back to the next pool, which
serves, prices and records the request; the limits checked are those of the pool asked for."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY = new_key()
ADMIN = new_key()
MESSAGES: Any = [{"role": "user", "content": "hi"}]
BACKUP_PRICE = {"input_per_1k": 10.0, "output_per_1k": 20.0}
T = TypeVar("T")


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture
def gateway_for(
    tmp_path: Path, upstream: FakeUpstream, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[dict[str, Any]], GatewayServer]]:
    """A gateway on a real Redis whose pool ``primary`` is down and falls back to ``backup``."""
    monkeypatch.setenv("SORTYARD_REDIS_URL", request.getfixturevalue("redis_flushed"))
    started: list[GatewayServer] = []

    def start(tenant_pools: dict[str, Any]) -> GatewayServer:
        document = fake_policy(upstream.base_url)
        document["pools"]["primary"] = {
            "replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "echo"}],  # nothing listens
            "price": {"input_per_1k": 1.0, "output_per_1k": 2.0},
        }
        document["pools"]["backup"] = {
            "replicas": [{"base_url": upstream.base_url, "model": "echo"}],
            "price": BACKUP_PRICE,
        }
        document["routing"] = {
            "health": {"probe_interval_s": 0},  # only the requests themselves find primary down
            "pools": {"primary": {"fallbacks": ["backup"]}},
        }
        document["retry"] = {"max_attempts": 2, "backoff_s": 0.001}
        document["auth"] = {"required": True}
        document["keys"] = [
            {"sha256": hash_key(KEY), "tenant": "acme", "name": "k"},
            {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
        ]
        document["tenants"] = {"acme": {"pools": tenant_pools}}
        document["store"] = {"url_env": "SORTYARD_REDIS_URL"}
        gateway = GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


def _client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0, timeout=10)


def _eventually(read: Callable[[], T], holds: Callable[[T], bool], timeout_s: float = 10.0) -> T:
    """``read()`` once ``holds`` of it: settles and metrics are written after the response is sent."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if holds(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not so after {timeout_s} s: {value!r}")
        time.sleep(0.02)


def _acme_usage(gateway: GatewayServer) -> dict[str, Any]:
    report = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    return report["tenants"].get("acme") or {"total": {"requests": 0}}


def _samples(gateway: GatewayServer, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = httpx.get(gateway.url + "/metrics").text
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_a_fallback_is_priced_and_recorded_at_the_pool_that_served_it(
    gateway_for: Callable[[dict[str, Any]], GatewayServer],
) -> None:
    gateway = gateway_for({})
    client = _client(gateway)
    raw = client.chat.completions.with_raw_response.create(model="primary", messages=MESSAGES)
    assert raw.headers["x-sortyard-fallback-pool"] == "backup"
    assert raw.parse().choices[0].message.content == "Hello from the fake upstream."
    with client.chat.completions.with_streaming_response.create(
        model="primary", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as streamed:
        assert streamed.headers["x-sortyard-fallback-pool"] == "backup"
        chunks = list(streamed.parse())
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == "Hello from the fake upstream."
    )

    # the fake reports 11 prompt and 6 completion tokens a request
    acme = _eventually(lambda: _acme_usage(gateway), lambda acme: acme["total"]["requests"] == 2)
    expected = {
        "requests": 2,
        "input_tokens": 22,
        "output_tokens": 12,
        "cost_usd": pytest.approx(
            (22 * BACKUP_PRICE["input_per_1k"] + 12 * BACKUP_PRICE["output_per_1k"]) / 1000
        ),
    }
    assert acme["pools"] == {"backup": expected}  # nothing at "primary": it served nothing
    assert acme["keys"]["k"] == expected and acme["total"] == expected

    tokens = _eventually(
        lambda: _samples(gateway, "sortyard_tokens_total"),
        lambda samples: samples.get((("direction", "output"), ("pool", "backup"))) == 12,
    )
    assert tokens == {
        (("direction", "input"), ("pool", "backup")): 22,
        (("direction", "output"), ("pool", "backup")): 12,
    }
    requests = _samples(gateway, "sortyard_requests_total")
    assert requests == {(("endpoint", "chat"), ("pool", "backup"), ("status", "200")): 2}


def test_a_fallback_counts_against_the_limits_of_the_pool_asked_for(
    gateway_for: Callable[[dict[str, Any]], GatewayServer],
) -> None:
    gateway = gateway_for(
        {
            "primary": {"requests_per_minute": 2, "tokens_per_minute": 10_000},
            "backup": {"requests_per_minute": 1},
        }
    )
    client = _client(gateway)
    for remaining in ("1", "0"):
        raw = client.chat.completions.with_raw_response.create(model="primary", messages=MESSAGES)
        assert raw.headers["x-sortyard-fallback-pool"] == "backup"
        assert raw.headers["x-ratelimit-limit-requests"] == "2"  # primary's limits were checked
        assert raw.headers["x-ratelimit-remaining-requests"] == remaining
        assert raw.headers["x-ratelimit-limit-tokens"] == "10000"
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="primary", messages=MESSAGES)
    assert "(pool:primary)" in info.value.message
    # the two fallbacks took nothing of backup's own limit: its one request a minute is still there
    raw = client.chat.completions.with_raw_response.create(model="backup", messages=MESSAGES)
    assert raw.headers["x-ratelimit-limit-requests"] == "1" and "x-sortyard-fallback-pool" not in raw.headers
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="backup", messages=MESSAGES)
    assert "(pool:backup)" in info.value.message

    # every served request in the ledger once, at the pool that served it; refusals cost nothing
    acme = _eventually(lambda: _acme_usage(gateway), lambda acme: acme["total"]["requests"] == 3)
    assert set(acme["pools"]) == {"backup"}
    assert acme["pools"]["backup"]["input_tokens"] == 33 and acme["pools"]["backup"]["output_tokens"] == 18
    assert acme["total"]["input_tokens"] == 33
