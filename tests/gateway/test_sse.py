"""The SSE relay: byte-level edits, no coalescing, and malformed input refused."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamProtocolError
from gateway.sse import SSERelay, model_rewriter, read_body_usage

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
