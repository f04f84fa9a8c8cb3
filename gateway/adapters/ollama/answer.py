"""Ollama's answers as OpenAI's: chat and text completions, plain and streamed, embeddings, errors.

Usage is ``prompt_eval_count`` / ``eval_count`` (absent counts as 0: older Ollama omits
``prompt_eval_count`` when the whole prompt came from its cache); the finish reason is
``done_reason`` (``length`` or ``stop``; without one, ``length`` when ``eval_count`` reached
``num_predict``). A thinking model's ``message.thinking`` is not relayed (its tokens are in
``eval_count``). A stream is NDJSON, the last object ``"done": true`` with the counts (it may still
carry text); ``{"error": ...}`` mid-stream becomes an OpenAI error event. Error bodies
``{"error": "<text>"}`` become OpenAI envelopes with the status kept (a JSON 404 is
``model_not_found``). Embeddings come back as OpenAI's list (``encoding_format: base64``: little-endian
float32, as OpenAI encodes them), ``usage.prompt_tokens`` from ``prompt_eval_count``.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

import msgspec

from gateway.adapters.shapes import Lines, OpenAIAnswer, error_body
from gateway.errors import UpstreamProtocolError

__all__ = ["Embeddings", "Generation"]

_encode = msgspec.json.encode


class _Message(msgspec.Struct):
    content: str = ""


class _Event(msgspec.Struct):
    """One ``/api/chat`` or ``/api/generate`` object (a whole answer, or a stream's line)."""

    message: _Message | None = None
    response: str = ""
    done: bool = False
    done_reason: str | None = None
    prompt_eval_count: int = 0
    eval_count: int = 0
    error: str | None = None


class _Embedded(msgspec.Struct):
    embeddings: list[list[float]]
    prompt_eval_count: int = 0


class _Failure(msgspec.Struct):
    error: str


_decode_event = msgspec.json.Decoder(_Event).decode
_decode_embedded = msgspec.json.Decoder(_Embedded).decode
_decode_failure = msgspec.json.Decoder(_Failure).decode


def _read(decode: Callable[[bytes], Any], payload: bytes, what: str) -> Any:
    try:
        return decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise UpstreamProtocolError(f"Ollama sent {what} that does not read: {e}") from None


def _error(status: int, payload: bytes) -> bytes:
    """Ollama's ``{"error": "<text>"}`` (or any text) as an OpenAI envelope with the status kept."""
    try:
        message, is_json = _decode_failure(payload).error, True
    except (msgspec.DecodeError, msgspec.ValidationError):
        message, is_json = payload.decode("utf-8", "replace").strip()[:500], False
    message = message or f"Ollama answered HTTP {status}."
    code = "model_not_found" if status == 404 and is_json else "upstream_status"
    return error_body(status, message, code=code)


class Generation:
    """The translator of one ``/api/chat`` (``chat``) or ``/api/generate`` exchange."""

    def __init__(self, model: str, *, chat: bool, num_predict: int | None) -> None:
        self.answer = OpenAIAnswer(model, chat=chat)
        self.num_predict = num_predict

    def text(self, event: _Event) -> str:
        if self.answer.chat:
            return event.message.content if event.message is not None else ""
        return event.response

    def finish_reason(self, event: _Event) -> str:
        if event.done_reason in ("stop", "length"):
            return event.done_reason
        if event.done_reason is None and self.num_predict and event.eval_count >= self.num_predict:
            return "length"  # an Ollama from before done_reason
        return "stop"

    def body(self, payload: bytes) -> bytes:
        event: _Event = _read(_decode_event, payload, "an answer")
        if event.error is not None:
            raise UpstreamProtocolError(f"Ollama answered 200 with an error: {event.error}")
        if not event.done:
            raise UpstreamProtocolError("Ollama's answer is not done (is the server streaming anyway?)")
        reason = self.finish_reason(event)
        return self.answer.body(self.text(event), reason, event.prompt_eval_count, event.eval_count)

    def error(self, status: int, payload: bytes) -> bytes:
        return _error(status, payload)

    def stream(self) -> _Stream:
        return _Stream(self)


class _Stream:
    """One NDJSON stream, line by line, into OpenAI chunks."""

    def __init__(self, generation: Generation) -> None:
        self.generation = generation
        self.lines = Lines()
        self.is_over = False
        """The done object or an error object came: nothing more is read."""

    def feed(self, chunk: bytes) -> bytes:
        return b"".join(self._line(line) for line in self.lines.feed(chunk))

    def end(self) -> bytes:
        rest = self.lines.rest
        if self.is_over or not rest.strip():
            return b""
        try:  # the done object without its newline ends the stream as well; anything else was cut
            event = _decode_event(rest)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return b""
        return self._event(event) if event.done or event.error is not None else b""

    def _line(self, line: bytes) -> bytes:
        if self.is_over or not line.strip():
            return b""
        return self._event(_read(_decode_event, line, "a stream line"))

    def _event(self, event: _Event) -> bytes:
        answer = self.generation.answer
        if event.error is not None:
            self.is_over = True
            return answer.error_event(500, event.error)
        out = answer.delta(self.generation.text(event))
        if event.done:
            self.is_over = True
            reason = self.generation.finish_reason(event)
            out += answer.finish(reason, event.prompt_eval_count, event.eval_count)
        return out


class Embeddings:
    """The translator of one ``/api/embed`` exchange (never streamed)."""

    def __init__(self, model: str, *, as_base64: bool) -> None:
        self.model = model
        self.as_base64 = as_base64

    def body(self, payload: bytes) -> bytes:
        answer: _Embedded = _read(_decode_embedded, payload, "embeddings")
        data = [
            {"object": "embedding", "index": i, "embedding": self._vector(vector)}
            for i, vector in enumerate(answer.embeddings)
        ]
        usage = {"prompt_tokens": answer.prompt_eval_count, "total_tokens": answer.prompt_eval_count}
        return _encode({"object": "list", "data": data, "model": self.model, "usage": usage})

    def _vector(self, vector: list[float]) -> list[float] | str:
        if not self.as_base64:
            return vector
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")

    def error(self, status: int, payload: bytes) -> bytes:
        return _error(status, payload)

    def stream(self) -> _Stream:
        raise UpstreamProtocolError("Ollama's embeddings are never streamed")
