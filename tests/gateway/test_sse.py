"""The SSE relay: byte-level edits, no coalescing, malformed input refused, the fingerprint kept."""

from __future__ import annotations

import msgspec
import pytest

from gateway.errors import UpstreamProtocolError
from gateway.sse import SSERelay, model_rewriter, read_body_usage, upstream_stream_options

CHUNK = b'data: {"model":"served","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
USAGE = b'data: {"model":"served","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'


def test_rewrites_model_and_passes_events_as_soon_as_complete() -> None:
    relay = SSERelay(model_rewriter("served", "asked"), drop_usage_chunk=False)
    half = len(CHUNK) // 2
    assert relay.feed(CHUNK[:half]) == b""
    out = relay.feed(CHUNK[half:])
    assert out == CHUNK.replace(b'"served"', b'"asked"')


def test_drops_only_the_usage_chunk_and_records_usage() -> None:
    relay = SSERelay((), drop_usage_chunk=True)
    out = relay.feed(CHUNK + USAGE + b"data: [DONE]\n\n")
    assert out == CHUNK + b"data: [DONE]\n\n"
    assert relay.usage is not None and (relay.usage.input_tokens, relay.usage.output_tokens) == (3, 2)
    assert relay.is_done


def test_crlf_comments_and_finish_reasons() -> None:
    relay = SSERelay((), drop_usage_chunk=False)
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    out = relay.feed(b": keep-alive\r\n\r\n" + finish.replace(b"\n", b"\r\n"))
    assert out == b": keep-alive\n\n" + finish
    assert relay.finish_reasons == ["stop"]


@pytest.mark.parametrize("event", [b"data: {nope\n\n", b"garbage line\n\n", b"data: [1, 2]\n\n"])
def test_malformed_events_stop_the_relay_after_the_good_ones(event: bytes) -> None:
    relay = SSERelay((), drop_usage_chunk=False)
    assert relay.feed(CHUNK + event + CHUNK) == CHUNK
    assert isinstance(relay.failure, UpstreamProtocolError)
    assert relay.feed(CHUNK) == b""


def test_body_usage() -> None:
    usage, reasons = read_body_usage(
        b'{"choices":[{"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":4}}'
    )
    assert usage is not None and usage.output_tokens == 4 and reasons == ["length"]
    with pytest.raises(UpstreamProtocolError):
        read_body_usage(b"<html>")


FINISH = b'data: {"model":"served","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
USAGE_FP = (
    b'data: {"model":"served","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2},'
    b'"system_fingerprint":"fp_1"}\n\n'
)


@pytest.mark.parametrize(
    "finish",
    [FINISH, FINISH.replace(b'"choices"', b'"system_fingerprint":null,"choices"')],
    ids=["absent", "null"],
)
def test_the_usage_chunks_fingerprint_moves_to_the_finish_chunk_it_followed(finish: bytes) -> None:
    # vLLM puts system_fingerprint on the usage chunk when usage is on; a client that did not ask for
    # usage gets it where the backend would have put it without usage: on the finish chunk
    relay = SSERelay((), drop_usage_chunk=True)
    assert relay.feed(CHUNK) == CHUNK
    assert relay.feed(finish) == b""  # held for the next event
    out = relay.feed(USAGE_FP + b"data: [DONE]\n\n")
    [sent, done] = out.split(b"\n\n")[:2]
    assert msgspec.json.decode(sent[5:]) == {**msgspec.json.decode(finish[5:]), "system_fingerprint": "fp_1"}
    assert done == b"data: [DONE]"
    assert relay.usage is not None and relay.usage.input_tokens == 3


def test_a_finish_chunk_is_held_only_while_the_usage_chunk_is_dropped_and_lacks_no_fingerprint() -> None:
    with_fp = FINISH.replace(b'"choices"', b'"system_fingerprint":"fp_0","choices"')
    assert SSERelay((), drop_usage_chunk=True).feed(with_fp) == with_fp
    assert SSERelay((), drop_usage_chunk=False).feed(FINISH) == FINISH
    relay = SSERelay((), drop_usage_chunk=True)  # no fingerprint anywhere: released as it was
    assert relay.feed(FINISH) == b""
    assert relay.feed(USAGE + b": ping\n\n") == FINISH + b": ping\n\n"


def test_a_held_finish_chunk_is_not_lost_when_the_stream_breaks_or_ends() -> None:
    relay = SSERelay((), drop_usage_chunk=True)
    assert relay.feed(FINISH + b"data: {nope\n\n") == FINISH
    assert isinstance(relay.failure, UpstreamProtocolError)
    relay = SSERelay((), drop_usage_chunk=True)
    assert relay.feed(FINISH) == b""
    assert relay.closing() == FINISH + b"data: [DONE]\n\n"
    relay = SSERelay((), drop_usage_chunk=True)
    relay.feed(FINISH)
    assert relay.error_event(UpstreamProtocolError("cut")).startswith(FINISH + b'data: {"error":')


def test_upstream_stream_options_keep_continuous_usage_only_for_a_client_that_asked_for_usage() -> None:
    asked = {"continuous_usage_stats": True}
    assert upstream_stream_options(asked, include_usage=False) == {"include_usage": True}
    assert upstream_stream_options({**asked, "include_usage": True}, include_usage=True) == {
        "continuous_usage_stats": True,
        "include_usage": True,
    }
    assert upstream_stream_options(None, include_usage=False) == {"include_usage": True}
    assert asked == {"continuous_usage_stats": True}  # the client's body is not edited in place


def test_an_upstream_error_event_is_relayed_and_kept_as_it_came() -> None:
    relay = SSERelay((), drop_usage_chunk=True)
    error = b'{"error":{"message":"out of memory","type":"server_error","param":null,"code":null}}'
    assert relay.feed(b"data: " + error + b"\n\n") == b"data: " + error + b"\n\n"
    assert relay.error == error[len(b'{"error":') : -1]
    quiet = SSERelay((), drop_usage_chunk=True)
    quiet.feed(b'data: {"choices":[],"error":null}\n\n')
    assert quiet.error is None
