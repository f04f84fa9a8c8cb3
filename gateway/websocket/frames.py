"""What the gateway sends on ``/v1/ws``: one JSON object a text frame, built from the relayed stream.

Every frame of a request's answer carries the request's ``id`` when it had one::

    tokens mode  {"id", "token": "..."}     one a content delta ("index" when not choice 0)
    openai mode  {"id", "chunk": {...}}     one an event: the SSE stream's chunk, byte for byte
    then one of  {"id", "done": true, "finish_reason", "usage", "request_id"}
                 {"id", "error": {"message", "type", "param", "code"}, "status", "retry_after_s",
                  "request_id"}         ("status" and "retry_after_s": failures before the stream)

The stream's bytes come from the pipeline exactly as an HTTP client would get them (``gateway.sse``:
model names rewritten, usage read); ``StreamFrames`` only re-cuts them into frames. An OpenAI chunk
is spliced into its frame as bytes, never decoded and encoded again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.errors import GatewayError, UpstreamProtocolError, render
from gateway.websocket.messages import MessageId, Mode

__all__ = ["StreamFrames", "error_frame", "frame"]

_encode = msgspec.json.encode


class _Delta(msgspec.Struct):
    content: Any = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    text: Any = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: msgspec.Raw = msgspec.Raw(b"")  # (``Raw | None`` would accept only null)


class _Envelope(msgspec.Struct):
    error: msgspec.Raw


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_envelope_decoder = msgspec.json.Decoder(_Envelope)


def frame(id: MessageId, fields: Mapping[str, Any]) -> bytes:
    """A frame: ``id`` first (left out when None), then ``fields``."""
    return _encode({"id": id, **fields} if id is not None else fields)


def _error_object(body: bytes) -> msgspec.Raw:
    """The inner ``{"message", "type", "param", "code"}`` of a rendered error."""
    try:
        return _envelope_decoder.decode(body).error
    except (msgspec.DecodeError, msgspec.ValidationError):  # rendered errors are enveloped: a bug
        return _envelope_decoder.decode(
            GatewayError("The upstream's error could not be read.").to_json()
        ).error


def error_frame(id: MessageId, error: GatewayError, request_id: str | None = None) -> bytes:
    """A request's answer when it fails before its stream starts: the error in OpenAI's shape, the
    HTTP status the same request would have got, and ``retry_after_s`` when it says when to retry."""
    status, body, headers = render(error)
    fields: dict[str, Any] = {"error": _error_object(body), "status": status}
    for name, value in headers.items():
        if name.lower() == "retry-after" and value.isdigit():
            fields["retry_after_s"] = int(value)
    if request_id is not None:
        fields["request_id"] = request_id
    return frame(id, fields)


class StreamFrames:
    """Turns one request's relayed server-sent events into frames (``feed``), then its last (``last``).

    ``keep_usage_chunk``: in openai mode, whether the usage-only chunk is sent (the client asked for
    ``stream_options.include_usage``); the done frame carries the usage either way."""

    def __init__(self, id: MessageId, mode: Mode, *, keep_usage_chunk: bool = True) -> None:
        self.id = id
        self.mode = mode
        self.keep_usage_chunk = keep_usage_chunk
        self.usage: dict[str, int] | None = None
        self.finish_reason: str | None = None
        self.error: msgspec.Raw | None = None
        """An error event: the stream failed after it started (the last frame is then an error)."""
        self.is_done = False
        self._head = b'{"id":' + _encode(id) + b"," if id is not None else b"{"
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The frames of the complete events in ``data`` (plus what was buffered); may be none."""
        if self._buffer:
            data = self._buffer + data
        end = data.rfind(b"\n\n")
        if end < 0:
            self._buffer = data
            return []
        self._buffer = data[end + 2 :]
        frames: list[bytes] = []
        for event in data[:end].split(b"\n\n"):
            if self.is_done or self.error is not None:
                break
            if event.startswith(b"data:"):  # comments and keep-alives are not forwarded
                self._event(event[5:].strip(), frames)
        return frames

    def _event(self, payload: bytes, frames: list[bytes]) -> None:
        if payload == b"[DONE]":
            self.is_done = True
            return
        try:
            chunk = _chunk_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.error = _error_object(UpstreamProtocolError("upstream sent a malformed event").to_json())
            return
        if bytes(chunk.error) not in (b"", b"null"):
            self.error = chunk.error
            return
        choices = chunk.choices or ()
        if chunk.usage is not None:
            prompt, completion = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
            self.usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        for choice in choices:
            if choice.finish_reason and self.finish_reason is None:
                self.finish_reason = choice.finish_reason
        if self.mode is Mode.OPENAI:
            if chunk.usage is None or choices or self.keep_usage_chunk:
                frames.append(self._head + b'"chunk":' + payload + b"}")
            return
        for choice in choices:  # tokens mode
            text = choice.delta.content if choice.delta is not None else choice.text
            if isinstance(text, str) and text:
                index = b',"index":%d' % choice.index if choice.index else b""
                frames.append(self._head + b'"token":' + _encode(text) + index + b"}")

    def last(self, request_id: str) -> bytes:
        """The answer's last frame: done, or the error that ended the stream."""
        if self.error is not None:
            return frame(self.id, {"error": self.error, "request_id": request_id})
        if not self.is_done:  # gateway.sse ends every stream with [DONE]: a stream cut short is a bug
            return error_frame(self.id, UpstreamProtocolError("The stream ended early."), request_id)
        return frame(
            self.id,
            {
                "done": True,
                "finish_reason": self.finish_reason,
                "usage": self.usage,
                "request_id": request_id,
            },
        )
