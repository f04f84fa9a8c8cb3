"""The limits stage over the memory store: admit or deny, the rate-limit headers, and the settlement
its finisher writes to the ledger."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import RateLimited, ServiceUnavailable
from gateway.pipeline import BytesResult, Call, Usage
from gateway.stages.limits import EnforceLimits, month_of
from gateway.stores import Admission, Decision, MemoryStore, StoreUnavailable
from tests.support.calls import USER_HI, api_key, build_call, policy_doc

NOW_S = 1_780_000_000.0
KEY, STANZA = api_key("acme", name="ci", limits={"requests_per_minute": 1})
PRICED = {
    "small": {
        "replicas": [{"base_url": "http://small-0.test/v1", "model": "m"}],
        "price": {"input_per_1k": 1.0},
    }
}


def _call(*stanzas: dict[str, Any], key: str = KEY, **body: Any) -> Call:
    document = policy_doc(pools=PRICED, keys=list(stanzas or [STANZA]))
    return build_call(document, {"model": "small", "messages": USER_HI, **body}, key=key)


async def _ledger(store: MemoryStore) -> dict[str, Any]:
    report = await store.usage(month_of(NOW_S), "acme")
    if "acme" not in report.tenants:
        return {}
    total = report.tenants["acme"].total
    return {
        "requests": total.requests,
        "input": total.input_tokens,
        "output": total.output_tokens,
        "usd": total.cost_usd,
    }


async def test_an_admitted_call_gets_the_headers_and_settles_its_usage_when_finished() -> None:
    store = MemoryStore()
    call = _call()
    await EnforceLimits(store, clock=lambda: NOW_S)(call)
    assert call.response_headers["x-ratelimit-limit-requests"] == "1"
    assert call.response_headers["x-ratelimit-remaining-requests"] == "0"
    assert await _ledger(store) == {}  # settled when the response is over, not before
    call.result, call.usage = BytesResult(200, b"{}"), Usage(1000, 7)  # what the upstream reported
    await call.finish()
    assert await _ledger(store) == {"requests": 1, "input": 1000, "output": 7, "usd": 1.0}


async def test_over_the_limit_is_429_with_retry_after_and_the_rejection_reported() -> None:
    store, rejections = MemoryStore(), list[str]()
    stage = EnforceLimits(store, clock=lambda: NOW_S, on_reject=rejections.append)
    await stage(_call())
    with pytest.raises(RateLimited, match="requests per minute") as raised:
        await stage(_call())
    assert raised.value.status == 429 and int(raised.value.headers["retry-after"]) >= 1
    assert rejections == ["requests"]


async def test_a_request_larger_than_the_tokens_limit_is_refused_outright() -> None:
    key, stanza = api_key("acme", limits={"tokens_per_minute": 100})
    with pytest.raises(RateLimited, match="Request too large"):
        await EnforceLimits(MemoryStore(), clock=lambda: NOW_S)(_call(stanza, key=key, max_tokens=500))


async def test_a_spent_budget_is_insufficient_quota() -> None:
    key, stanza = api_key("acme", budget={"monthly_usd": 0.5})
    store = MemoryStore()
    stage = EnforceLimits(store, clock=lambda: NOW_S)
    call = _call(stanza, key=key)
    await stage(call)
    call.result, call.usage = BytesResult(200, b"{}"), Usage(1000, 0)  # $1 at $1 per 1k input tokens
    await call.finish()
    with pytest.raises(RateLimited) as raised:
        await stage(_call(stanza, key=key))
    assert raised.value.code == "insufficient_quota"


async def test_a_call_without_limits_still_reaches_the_ledger_estimated_when_usage_never_came() -> None:
    key, stanza = api_key("acme")
    store = MemoryStore()
    call = _call(stanza, key=key)
    await EnforceLimits(store, clock=lambda: NOW_S)(call)
    assert not any(name.startswith("x-ratelimit") for name in call.response_headers)
    call.result, call.num_events = BytesResult(200, b"{}"), 4  # a stream cut before its usage chunk
    await call.finish()
    ledger = await _ledger(store)
    assert ledger["requests"] == 1 and ledger["output"] == 4 and ledger["input"] == call.num_prompt_tokens


class DownStore(MemoryStore):
    async def admit(self, admission: Admission) -> Decision:
        raise StoreUnavailable(retry_after_s=2.0)


async def test_a_store_that_cannot_answer_is_503() -> None:
    with pytest.raises(ServiceUnavailable) as raised:
        await EnforceLimits(DownStore(), clock=lambda: NOW_S)(_call())
    assert raised.value.code == "store_unavailable" and raised.value.headers == {"Retry-After": "2"}
