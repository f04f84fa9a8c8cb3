"""The limits stage over the memory store: admit or deny, the rate-limit headers, and the settlement
its finisher writes to the ledger."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import RateLimited, ServiceUnavailable
from gateway.pipeline import BytesResult, Call, Endpoint, Usage
from gateway.stages.limits import EnforceLimits, max_output_tokens, month_of, prompt_tokens
from gateway.stores import Admission, Decision, MemoryStore, StoreUnavailable
from gateway.tokens import TokenCounter
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


async def test_two_calls_with_one_client_request_id_are_two_requests_in_the_store() -> None:
    # clients repeat x-request-id: the store must not take the second for the first's settle or lease
    store = MemoryStore()
    stanza = {**STANZA, "limits": {"max_concurrent": 2}}
    stage = EnforceLimits(store, clock=lambda: NOW_S)
    calls = [_call(stanza), _call(stanza)]
    assert calls[0].request_id == calls[1].request_id
    for call in calls:
        await stage(call)
    for call in calls:
        call.result, call.usage = BytesResult(200, b"{}"), Usage(10, 1)
        await call.finish()
    assert await _ledger(store) == {"requests": 2, "input": 20, "output": 2, "usd": 0.02}  # not 1, 10, 1


def _template_call(endpoint: Endpoint, body: dict[str, Any], **pool: Any) -> Call:
    pools = {"small": {**PRICED["small"], **pool}}
    return build_call(policy_doc(pools=pools), {"model": "small", **body}, endpoint=endpoint)


def test_a_chat_prompt_counts_its_pools_chat_template() -> None:
    counter = TokenCounter.for_model("small", default_encoding="cl100k_base")
    text = counter.count_text("user") + counter.count_text("hi")
    assert prompt_tokens(_template_call(Endpoint.CHAT, {"messages": USER_HI})) == text + 3 + 3  # OpenAI's
    template = {"template_tokens": {"per_message": 5, "per_request": 21}}
    assert prompt_tokens(_template_call(Endpoint.CHAT, {"messages": USER_HI}, **template)) == text + 5 + 21
    responses = _template_call(Endpoint.RESPONSES, {"input": "hi", "max_output_tokens": 40}, **template)
    assert prompt_tokens(responses) == text + 5 + 21  # the input is one user message
    assert max_output_tokens(responses) == 40


async def test_a_cut_stream_is_billed_its_prompt_with_the_template_and_its_events() -> None:
    store = MemoryStore()
    call = _template_call(Endpoint.CHAT, {"messages": USER_HI}, template_tokens={"per_request": 30})
    await EnforceLimits(store, clock=lambda: NOW_S)(call)
    call.result, call.num_events = BytesResult(200, b""), 4  # the stream was cut: no usage came
    await call.finish()
    report = await store.usage(month_of(NOW_S))
    total = report.tenants["anonymous"].total
    assert (total.input_tokens, total.output_tokens) == (prompt_tokens(call), 4)
    assert total.input_tokens > 30


async def test_a_passthrough_route_counts_a_request_and_no_tokens() -> None:
    store = MemoryStore()
    call = _template_call(Endpoint.PASSTHROUGH, {"prompt": "hi", "max_tokens": 99})
    await EnforceLimits(store, clock=lambda: NOW_S)(call)
    assert prompt_tokens(call) == 0 and max_output_tokens(call) == 0
    call.result = BytesResult(200, b"{}")
    await call.finish()
    total = (await store.usage(month_of(NOW_S))).tenants["anonymous"].total
    assert (total.requests, total.input_tokens, total.output_tokens) == (1, 0, 0)
