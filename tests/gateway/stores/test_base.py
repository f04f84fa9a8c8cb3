"""The pure helpers of gateway/stores/base.py: header rendering, month arithmetic, report merging."""

from __future__ import annotations

import pytest

from gateway.stores import (
    Decision,
    FailoverStore,
    MemoryStore,
    RedisStore,
    Store,
    TenantUsage,
    UsageReport,
    UsageTotals,
    format_reset,
    openai_ratelimit_headers,
)
from gateway.stores.base import seconds_to_next_month
from gateway.stores.key_names import KeySpace
from tests.gateway.stores.conftest import T0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.02, "20ms"), (1.0, "1s"), (59.2, "1m0s"), (360, "6m0s"), (3723, "1h2m3s")],
)
def test_reset_uses_openais_format(seconds: float, text: str) -> None:
    assert format_reset(seconds) == text


def test_headers_of_an_allowed_and_a_denied_decision() -> None:
    allowed = Decision(
        allowed=True, limit_requests=300, remaining_requests=299, reset_requests_s=60.5,
        limit_tokens=None, remaining_tokens=None, reset_tokens_s=None,
    )  # fmt: skip
    assert openai_ratelimit_headers(allowed) == {
        "x-ratelimit-limit-requests": "300",
        "x-ratelimit-remaining-requests": "299",
        "x-ratelimit-reset-requests": "1m1s",
    }
    denied = Decision(
        allowed=False, reason="tokens", scope="key:k1", retry_after_s=0.2, limit_tokens=1000,
        remaining_tokens=0, reset_tokens_s=12.0,
    )  # fmt: skip
    headers = openai_ratelimit_headers(denied)
    assert headers["retry-after"] == "1" and headers["x-ratelimit-remaining-tokens"] == "0"
    assert "x-ratelimit-limit-requests" not in headers


def test_seconds_to_next_month() -> None:
    assert seconds_to_next_month("2026-11", T0) == 16 * 86400
    assert seconds_to_next_month("2026-12", T0 + 46 * 86400) == pytest.approx(86400)  # Dec 31 -> Jan 1
    assert seconds_to_next_month("2026-10", T0) == 1.0  # a month in the past: at least 1 s


def test_reports_merge_by_tenant_key_and_pool() -> None:
    one = UsageTotals(requests=1, input_tokens=10, output_tokens=1, cost_usd=0.5)
    a = UsageReport("2026-11", {"t": TenantUsage(total=one, keys={"k": one}, pools={"p": one})})
    b = UsageReport("2026-11", {"t": TenantUsage(total=one, keys={"k2": one}, pools={"p": one}),
                                "u": TenantUsage(total=one, keys={}, pools={})})  # fmt: skip
    merged = a.merged(b)
    assert merged.tenants["t"].total == one + one
    assert merged.tenants["t"].keys == {"k": one, "k2": one}
    assert merged.tenants["t"].pools["p"].requests == 2
    assert merged.tenants["u"].total == one


def test_keys_are_hash_tagged_and_tenants_read_back() -> None:
    keys = KeySpace("sy:")
    assert keys.requests("acme", "key:k1") == "sy:{t:acme}:rpm:key:k1"
    odd = "a}b{c%7D"
    assert keys.tenant_of_usage_key(keys.usage(odd, "2026-11")) == odd


def test_every_store_satisfies_the_protocol() -> None:
    redis_store = RedisStore("redis://127.0.0.1:1/0")
    for store in (MemoryStore(), redis_store, FailoverStore(MemoryStore(), MemoryStore(), mode="fail_open")):
        assert isinstance(store, Store)
