"""gateway/websocket/frames.py: the relayed stream's events re-cut into frames, and error frames."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gateway.errors import InvalidRequest, RateLimited, UpstreamStatusError
from gateway.websocket.frames import StreamFrames, error_frame, frame
from gateway.websocket.messages import MessageId, Mode
from tests.support.calls import chat_chunk

USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}


def _event(document: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(document) + b"\n\n"


STREAM = b"".join(
    [
        _event(chat_chunk("small", "")),
        b": keep-alive\n\n",
        _event(chat_chunk("small", "Hel")),
        _event(chat_chunk("small", "lo.")),
        _event(chat_chunk("small", finish="stop")),
        _event(chat_chunk("small", usage=(11, 2))),
        b"data: [DONE]\n\n",
    ]
)


def _frames(frames: StreamFrames, stream: bytes, step: int) -> list[dict[str, Any]]:
    """Feed ``stream`` ``step`` bytes at a time (events cut anywhere); every frame, the last included."""
    out = []
    for start in range(0, len(stream), step):
        out += frames.feed(stream[start : start + step])
    return [json.loads(f) for f in [*out, frames.last("req-1")]]


def test_tokens_mode_sends_each_content_delta_then_done() -> None:
    for step in (1, 7, len(STREAM)):
        assert _frames(StreamFrames("a", Mode.TOKENS), STREAM, step) == [
            {"id": "a", "token": "Hel"},
            {"id": "a", "token": "lo."},
            {"id": "a", "done": True, "finish_reason": "stop", "usage": USAGE, "request_id": "req-1"},
        ]


def test_tokens_of_other_choices_and_of_completions_name_their_index() -> None:
    chunk = {"choices": [{"index": 1, "delta": {"content": "b"}}, {"index": 0, "text": "a"}]}
    assert StreamFrames(None, Mode.TOKENS).feed(_event(chunk)) == [
        b'{"token":"b","index":1}',
        b'{"token":"a"}',
    ]


def test_openai_mode_splices_each_chunk_byte_for_byte() -> None:
    frames = StreamFrames(3, Mode.OPENAI, keep_usage_chunk=False)
    sent = [json.loads(f) for f in frames.feed(STREAM)]
    chunks = [c for c in STREAM.split(b"\n\n") if c.startswith(b"data: {")]
    assert [msgspec.json.encode(f["chunk"]) for f in sent] == [c[6:] for c in chunks[:-1]]  # not the usage
    assert {f["id"] for f in sent} == {3}
    assert json.loads(frames.last("req-1"))["usage"] == USAGE  # the done frame has it all the same
    kept = StreamFrames(None, Mode.OPENAI).feed(STREAM)
    assert len(kept) == len(chunks) and kept[-1].startswith(b'{"chunk":{')


def test_an_error_event_ends_the_answer_with_an_error_frame() -> None:
    error = {"error": {"message": "gone", "type": "server_error", "param": None, "code": "upstream_timeout"}}
    frames = StreamFrames("e", Mode.TOKENS)
    sent = frames.feed(_event(chat_chunk("small", "Hi")) + _event(error) + b"data: [DONE]\n\n")
    assert sent == [b'{"id":"e","token":"Hi"}']
    assert json.loads(frames.last("req-1")) == {"id": "e", **error, "request_id": "req-1"}


def test_a_stream_cut_before_done_or_not_json_is_a_protocol_error() -> None:
    assert json.loads(StreamFrames(None, Mode.TOKENS).last("r"))["error"]["code"] == "upstream_protocol_error"
    frames = StreamFrames(None, Mode.TOKENS)
    assert frames.feed(b"data: {nope\n\n") == []
    assert json.loads(frames.last("r"))["error"]["code"] == "upstream_protocol_error"


def test_error_frames_carry_the_status_and_when_to_retry() -> None:
    limited = RateLimited("slow down", headers={"retry-after": "7", "x-ratelimit-limit-requests": "1"})
    assert json.loads(error_frame("a", limited, "req-1")) == {
        "id": "a",
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        },
        "status": 429,
        "retry_after_s": 7,
        "request_id": "req-1",
    }
    bad = json.loads(error_frame(None, InvalidRequest("no", param="x", code="invalid_value")))
    assert bad == {
        "error": {"message": "no", "type": "invalid_request_error", "param": "x", "code": "invalid_value"},
        "status": 400,
    }
    body = (
        b'{"error": {"message": "bad thing", "type": "invalid_request_error", "param": "x", "code": "bad"}}'
    )
    relayed = json.loads(error_frame(1, UpstreamStatusError(422, body, "rejected")))
    assert relayed["status"] == 422 and relayed["error"]["code"] == "bad"


def test_frame_puts_the_id_first_and_leaves_out_a_missing_one() -> None:
    ids: list[MessageId] = ["x", 0, None]
    assert [frame(i, {"done": True}) for i in ids] == [
        b'{"id":"x","done":true}',
        b'{"id":0,"done":true}',
        b'{"done":true}',
    ]
