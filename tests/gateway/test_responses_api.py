"""gateway/responses_api.py: the Responses API's prompt, usage and stream, alone and through the upstream
stage over an in-memory upstream."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.errors import UpstreamProtocolError
from gateway.pipeline import Endpoint, StreamResult, Usage
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.responses_api import ResponsesRelay, as_messages, read_response_usage
from gateway.sse import model_rewriter
from gateway.stages.upstream import CallUpstream
from tests.support.calls import balancer_for, build_call, policy_doc, read_result, replica_of, served_model

SERVED = served_model("small")


def response(
    status: str = "completed", usage: tuple[int, int] | None = (13, 6), **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "resp_1", "object": "response", "model": SERVED, "status": status, **extra}
    if usage is not None:
        body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def event(kind: str, number: int, **fields: Any) -> bytes:
    data = {"type": kind, "sequence_number": number, **fields}
    return f"event: {kind}\ndata: ".encode() + msgspec.json.encode(data) + b"\n\n"


STREAM = [
    event("response.created", 0, response=response("in_progress", None)),
    event("response.output_text.delta", 1, delta="Hel"),
    event("response.output_text.delta", 2, delta="lo."),
    event("response.completed", 3, response=response()),
]


def test_instructions_and_input_as_chat_messages() -> None:
    assert as_messages({"instructions": "Be brief.", "input": "hi"}) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert as_messages({"input": items}) == items
    assert as_messages({"previous_response_id": "resp_0"}) == []


def test_a_plain_answers_usage_and_outcome() -> None:
    assert read_response_usage(msgspec.json.encode(response())) == (Usage(13, 6), ["completed"])
    incomplete = response("incomplete", incomplete_details={"reason": "max_output_tokens"})
    assert read_response_usage(msgspec.json.encode(incomplete))[1] == ["max_output_tokens"]
    with pytest.raises(UpstreamProtocolError):
        read_response_usage(b"<html>")


def test_the_relay_passes_typed_events_as_they_come_and_takes_usage_from_the_last() -> None:
    relay = ResponsesRelay(model_rewriter(SERVED, "asked"))
    first = STREAM[0]
    assert relay.feed(first[:20]) == b""
    assert relay.feed(first[20:]) == first.replace(SERVED.encode(), b"asked")
    assert relay.feed(b"".join(STREAM[1:3])) == b"".join(STREAM[1:3])
    assert not relay.is_complete and relay.usage is None
    relay.feed(STREAM[3])
    assert relay.is_complete and not relay.is_done  # no [DONE] in this API: read on to the end
    assert relay.usage == Usage(13, 6) and relay.finish_reasons == ["completed"]
    assert relay.num_events == 2  # the output's deltas: the output-token estimate of a cut stream
    assert relay.closing() == b""


def test_the_gateways_own_error_is_the_apis_error_event() -> None:
    relay = ResponsesRelay(())
    relay.feed(b"".join(STREAM[:2]))
    out = relay.error_event(UpstreamProtocolError("upstream closed the stream before its end"))
    assert out.startswith(b"event: error\ndata: ")
    assert msgspec.json.decode(out.split(b"data: ", 1)[1]) == {
        "type": "error",
        "code": "upstream_protocol_error",
        "message": "upstream closed the stream before its end",
        "param": None,
        "sequence_number": 2,
    }


@pytest.mark.parametrize("bad", [b"event: x\ndata: {nope\n\n", b"garbage\n\n"])
def test_malformed_events_stop_the_relay(bad: bytes) -> None:
    relay = ResponsesRelay(())
    assert relay.feed(STREAM[0] + bad + STREAM[1]) == STREAM[0]
    assert isinstance(relay.failure, UpstreamProtocolError)


def _stage(reply: Reply, body: dict[str, Any]) -> tuple[CallUpstream, MemoryUpstreamClient, Any]:
    call = build_call(policy_doc(), body, endpoint=Endpoint.RESPONSES)
    client = MemoryUpstreamClient(lambda url, sent, headers: reply)
    balancer = balancer_for(call.compiled)
    call.replica = replica_of(balancer, "small")
    return CallUpstream(client, balancer), client, call


async def test_a_stream_through_the_upstream_stage() -> None:
    stage, client, call = _stage(
        Reply(parts=tuple(STREAM), content_type="text/event-stream"),
        {"model": "small", "input": "hi", "stream": True, "stream_options": {"include_obfuscation": False}},
    )
    await stage(call)
    [request] = client.requests
    assert request.url == "http://small-0.test/v1/responses"
    assert request.json()["stream_options"] == {"include_obfuscation": False}  # no include_usage here
    assert isinstance(call.result, StreamResult)
    assert await read_result(call.result) == b"".join(STREAM).replace(SERVED.encode(), b"small")
    assert call.usage == Usage(13, 6) and client.responses[0].is_released


async def test_a_cut_stream_ends_with_the_apis_error_event() -> None:
    stage, client, call = _stage(
        Reply(parts=tuple(STREAM[:2]), content_type="text/event-stream"),
        {"model": "small", "input": "hi", "stream": True},
    )
    await stage(call)
    out = await read_result(call.result)
    assert out.endswith(
        b'"code":"upstream_protocol_error","message":"upstream closed the stream before its end",'
        b'"param":null,"sequence_number":2}\n\n'
    )
    assert call.usage is None and call.num_events == 1 and client.responses[0].is_closed


async def test_a_plain_answer_through_the_upstream_stage() -> None:
    stage, _, call = _stage(Reply.json(response()), {"model": "small", "input": "hi"})
    await stage(call)
    assert call.usage == Usage(13, 6) and call.finish_reasons == ["completed"]
    assert msgspec.json.decode(await read_result(call.result))["model"] == "small"
