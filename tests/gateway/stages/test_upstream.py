"""The upstream stage over an in-memory upstream: what it sends, what it makes of each answer."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pytest

from gateway.errors import (
    ServiceUnavailable,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
)
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult, Usage
from gateway.replicas.balancer import Balancer
from gateway.replicas.memory_client import Handler, MemoryUpstreamClient, Reply
from gateway.stages.upstream import CallUpstream
from tests.support.calls import (
    USER_HI,
    api_key,
    balancer_for,
    build_call,
    chat_chunk,
    chat_completion,
    policy_doc,
    read_result,
    replica_of,
    served_model,
)

SERVED = served_model("small")
STREAM = Reply.sse(
    chat_chunk(SERVED, "Hel"),
    chat_chunk(SERVED, "lo."),
    chat_chunk(SERVED, finish="stop"),
    chat_chunk(SERVED, usage=(11, 2)),
)


def _setup(handler: Handler, call: Call) -> tuple[CallUpstream, MemoryUpstreamClient, Balancer]:
    """The stage, its client and balancer, with ``call`` holding the pool's first replica."""
    client = MemoryUpstreamClient(handler)
    balancer = balancer_for(call.compiled)
    assert call.pool is not None
    call.replica = replica_of(balancer, call.pool)
    return CallUpstream(client, balancer), client, balancer


async def test_a_plain_response_names_the_asked_model_and_reports_usage() -> None:
    call = build_call(
        policy_doc(aliases={"gpt-4o-mini": "small"}), {"model": "gpt-4o-mini", "messages": USER_HI}
    )
    stage, client, _ = _setup(lambda url, body, headers: Reply.json(chat_completion(SERVED)), call)
    await stage(call)
    [request] = client.requests
    assert request.url == "http://small-0.test/v1/chat/completions"
    assert request.json()["model"] == SERVED and request.headers["X-Request-Id"].startswith("req-test-")
    assert isinstance(call.result, BytesResult)
    assert msgspec.json.decode(call.result.body)["model"] == "gpt-4o-mini"
    assert call.usage == Usage(11, 3) and call.finish_reasons == ["stop"]
    assert client.responses[0].is_released
    assert call.replica is not None and call.replica.num_successes == 1


async def test_the_replica_is_held_until_the_call_finishes() -> None:
    call = build_call(policy_doc())
    stage, _, _ = _setup(lambda url, body, headers: Reply.json(chat_completion(SERVED)), call)
    await stage(call)
    assert call.replica is not None and call.replica.outstanding == 1
    await call.finish()
    assert call.replica.outstanding == 0


async def test_a_stream_is_relayed_with_the_asked_model_and_its_usage_accounted() -> None:
    call = build_call(
        policy_doc(aliases={"gpt-4o-mini": "small"}),
        {"model": "gpt-4o-mini", "messages": USER_HI, "stream": True},
    )
    stage, client, _ = _setup(lambda url, body, headers: STREAM, call)
    await stage(call)
    assert client.requests[0].json()["stream_options"] == {"include_usage": True}  # the gateway needs it
    assert isinstance(call.result, StreamResult)
    events = (await read_result(call.result)).split(b"\n\n")
    assert [msgspec.json.decode(e[6:])["model"] for e in events[:3]] == ["gpt-4o-mini"] * 3
    assert events[3:] == [b"data: [DONE]", b""]  # the usage chunk the client did not ask for is dropped
    assert call.usage == Usage(11, 2) and call.finish_reasons == ["stop"] and call.num_events == 4
    assert client.responses[0].is_released and call.error is None
    assert call.replica is not None and call.replica.outstanding == 1  # until the request's owner finishes it
    await call.finish()
    assert call.replica.outstanding == 0


async def test_a_stream_keeps_the_usage_chunk_when_asked() -> None:
    body = {"model": "small", "messages": USER_HI, "stream": True, "stream_options": {"include_usage": True}}
    call = build_call(policy_doc(), body)
    stage, _, _ = _setup(lambda url, body, headers: STREAM, call)
    await stage(call)
    assert isinstance(call.result, StreamResult)
    assert b'"usage":{"prompt_tokens":11' in await read_result(call.result)


async def test_a_5xx_is_an_upstream_error_that_counts_against_the_replica() -> None:
    call = build_call(policy_doc())
    stage, client, _ = _setup(lambda url, body, headers: Reply(status=500, body=b"kaboom"), call)
    with pytest.raises(UpstreamError, match="HTTP 500"):
        await stage(call)
    assert call.result is None and client.responses[0].is_released
    assert call.replica is not None and call.replica.num_failures == 1


async def test_an_openai_shaped_4xx_is_relayed_and_never_counts_against_the_replica() -> None:
    error = {"error": {"message": "bad thing", "type": "invalid_request_error", "param": "x", "code": "bad"}}
    call = build_call(policy_doc())
    stage, _, _ = _setup(lambda url, body, headers: Reply.json(error, status=400), call)
    with pytest.raises(UpstreamStatusError) as raised:
        await stage(call)
    assert raised.value.upstream_status == 400 and msgspec.json.decode(raised.value.upstream_body) == error
    assert call.replica is not None and call.replica.num_failures == 0


async def test_a_relayed_4xx_names_the_asked_model_not_the_replicas() -> None:
    message = f"The model `{SERVED}` does not exist."
    error = {"error": {"message": message, "type": "invalid_request_error", "param": "model", "code": None}}
    call = build_call(
        policy_doc(aliases={"gpt-4o-mini": "small"}), {"model": "gpt-4o-mini", "messages": USER_HI}
    )
    stage, _, _ = _setup(lambda url, body, headers: Reply.json(error, status=404), call)
    with pytest.raises(UpstreamStatusError) as raised:
        await stage(call)
    relayed = msgspec.json.decode(raised.value.upstream_body)["error"]["message"]
    assert relayed == "The model `gpt-4o-mini` does not exist." and SERVED not in relayed


async def test_a_connect_error_counts_against_the_replica_and_the_finish_releases_it() -> None:
    def refuse(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        raise UpstreamConnectError("upstream small-0: cannot connect (Connection refused)")

    call = build_call(policy_doc())
    stage, _, _ = _setup(refuse, call)
    with pytest.raises(UpstreamConnectError):
        await stage(call)
    assert call.replica is not None and call.replica.num_failures == 1 and call.replica.outstanding == 1
    await call.finish()
    assert call.replica.outstanding == 0


async def test_a_stream_broken_after_its_first_event_ends_with_an_error_event() -> None:
    broken = Reply.sse(chat_chunk(SERVED, "Hel"), UpstreamProtocolError("connection reset"), done=False)
    call = build_call(policy_doc(), {"model": "small", "messages": USER_HI, "stream": True})
    stage, client, _ = _setup(lambda url, body, headers: broken, call)
    await stage(call)
    assert isinstance(call.result, StreamResult)
    body = await read_result(call.result)
    assert b"upstream_protocol_error" in body and body.endswith(b"data: [DONE]\n\n")
    assert client.responses[0].is_closed and not client.responses[0].is_released
    assert isinstance(call.error, UpstreamProtocolError)


async def test_a_stream_that_ends_before_any_event_is_a_plain_error() -> None:
    call = build_call(policy_doc(), {"model": "small", "messages": USER_HI, "stream": True})
    stage, client, _ = _setup(lambda url, body, headers: Reply.sse(done=False), call)
    with pytest.raises(UpstreamProtocolError, match="before sending an event"):
        await stage(call)
    assert client.responses[0].is_closed


async def test_the_policy_priority_is_sent_and_a_client_may_only_ask_for_later() -> None:
    text, stanza = api_key("acme", priority=5, allow_client_priority=True)
    document = policy_doc(keys=[stanza])
    sent: list[object] = []

    def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        sent.append(msgspec.json.decode(body).get("priority"))
        return Reply.json(chat_completion(SERVED))

    for given in (None, 1, 9):
        body = {"model": "small", "messages": USER_HI, **({"priority": given} if given is not None else {})}
        call = build_call(document, body, key=text)
        stage, _, _ = _setup(handler, call)
        await stage(call)
    assert sent == [5, 5, 9]


@pytest.mark.parametrize("is_stream", [False, True])
async def test_a_good_answer_joins_the_replicas_recent_latency(is_stream: bool) -> None:
    call = build_call(policy_doc(), {"model": "small", "messages": USER_HI, "stream": is_stream})
    reply = STREAM if is_stream else Reply.json(chat_completion(SERVED))
    stage, _, balancer = _setup(lambda url, body, headers: reply, call)
    await stage(call)
    assert call.replica is not None
    summary = call.replica.latency.summary(balancer.clock())
    assert summary.num_samples == 1 and summary.p50_ms is not None
    assert summary.p50_ms == pytest.approx(call.upstream_s * 1000, abs=0.001)  # time to the first byte


async def test_each_attempt_sends_its_own_request_id() -> None:
    # the client's x-request-id repeats (and vLLM makes the completion's id from the header): never sent as is
    handler = lambda url, body, headers: Reply.json(chat_completion(SERVED))  # noqa: E731
    client = MemoryUpstreamClient(handler)
    for _ in range(2):
        call = build_call(policy_doc(), request_id="same")
        balancer = balancer_for(call.compiled)
        call.replica = replica_of(balancer, "small")
        await CallUpstream(client, balancer)(call)
    sent = [request.headers["X-Request-Id"] for request in client.requests]
    assert len(set(sent)) == 2 and all(sent_id.startswith("same-") for sent_id in sent)


async def test_a_passthrough_route_goes_to_the_replicas_origin_untouched() -> None:
    pools = {
        "small": {
            "replicas": [{"base_url": "http://small-0.test/v1", "model": SERVED}],
            "passthrough_routes": ["/tokenize"],
        },
        "other": {"replicas": [{"base_url": "http://other-0.test/v1", "model": "o"}]},
    }
    answer = {"count": 2, "max_model_len": 4096, "tokens": [104, 105]}
    call = build_call(
        policy_doc(pools=pools), {"model": "small", "prompt": "hi"}, endpoint=Endpoint.PASSTHROUGH
    )
    call.path = "/tokenize"
    stage, client, _ = _setup(lambda url, body, headers: Reply.json(answer), call)
    await stage(call)
    [request] = client.requests
    assert request.url == "http://small-0.test/tokenize"
    assert request.json() == {"model": SERVED, "prompt": "hi"}  # no priority, no stream options
    assert isinstance(call.result, BytesResult) and msgspec.json.decode(call.result.body) == answer
    assert call.usage is None
    call = build_call(
        policy_doc(pools=pools), {"model": "small", "prompt": "hi"}, endpoint=Endpoint.PASSTHROUGH
    )
    call.path = "/tokenize"
    balancer = balancer_for(call.compiled)
    call.replica = replica_of(balancer, "other")  # a fallback pool that does not declare the route
    with pytest.raises(ServiceUnavailable, match="can serve /tokenize"):
        await CallUpstream(client, balancer)(call)
    assert call.replica.outstanding == 0
