"""Triton's answers as OpenAI's: the generate answer, its SSE stream, and its errors.

The answer (``{"model_name", "model_version", "text_output", "num_input_tokens",
"num_output_tokens", ...}``; a stream's SSE ``data:`` events carry one piece each, its counts those
of the piece) becomes the OpenAI response: the text cut before the first stop string (TensorRT-LLM
returns the stop word itself), usage from the counts (a stream's output counts summed), finish reason
``stop`` when a stop string ended it, ``length`` when the output tokens reach ``max_tokens``, else
``stop``. A server that returns no count (an ensemble without those outputs) gets an estimate of
one token per 4 characters, at least 1, for the missing figure. ``{"error": "..."}`` (400 bad input,
404 unknown model, 500) becomes an OpenAI envelope with the status kept; a ``data: {"error": ...}``
event mid-stream an error event, after which the stream counts as failed.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from gateway.adapters.shapes import Lines, OpenAIAnswer, decode_event, error_body, sse_data
from gateway.adapters.stop import StopScanner, cut_at_stop
from gateway.errors import UpstreamProtocolError

__all__ = ["Reply"]


def _estimate(text: str) -> int:
    """A token count for a server that gave none: one per 4 characters, at least 1 for any text."""
    return math.ceil(len(text) / 4) if text else 0


def _count(event: dict[str, Any], name: str) -> int | None:
    """A ``num_*_tokens`` output: a number, or the one-element list a [1]-shaped tensor may be."""
    value = event.get(name)
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UpstreamProtocolError(f"Triton sent a {name} that is not a count")
    return value


def _text(event: Any) -> str:
    if not isinstance(event, dict):
        raise UpstreamProtocolError("Triton sent a generate answer that is not an object")
    text = event.get("text_output")
    while isinstance(text, list) and len(text) == 1:
        text = text[0]
    if not isinstance(text, str):
        raise UpstreamProtocolError("Triton sent a generate answer without text_output")
    return text


def _finish(stopped: bool, completion_tokens: int, max_tokens: int | None) -> str:
    if stopped or max_tokens is None or completion_tokens < max_tokens:
        return "stop"
    return "length"


class Reply:
    """The ``Translator`` of one Triton exchange."""

    def __init__(
        self, answer: OpenAIAnswer, prompt: str, max_tokens: int | None, stops: tuple[str, ...]
    ) -> None:
        self.answer = answer
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.stops = stops

    def body(self, payload: bytes) -> bytes:
        event = decode_event(payload, "Triton")
        generated = _text(event)
        text, stopped = cut_at_stop(generated, self.stops)
        prompt_tokens = _count(event, "num_input_tokens")
        completion_tokens = _count(event, "num_output_tokens")
        if prompt_tokens is None:
            prompt_tokens = _estimate(self.prompt)
        if completion_tokens is None:
            completion_tokens = _estimate(generated)
        finish = _finish(stopped, completion_tokens, self.max_tokens)
        return self.answer.body(text, finish, prompt_tokens, completion_tokens)

    def error(self, status: int, payload: bytes) -> bytes:
        message = ""
        try:
            document = msgspec.json.decode(payload)
        except msgspec.DecodeError:
            document = None
        if isinstance(document, dict) and isinstance(document.get("error"), str):
            message = document["error"]
        else:
            message = payload.decode("utf-8", "replace").strip()[:500]
        return error_body(status, message or f"Triton answered HTTP {status}.")

    def stream(self) -> _Stream:
        return _Stream(self)


class _Stream:
    """Triton's SSE events (one generated piece each) as OpenAI chunks."""

    def __init__(self, reply: Reply) -> None:
        self._reply = reply
        self._lines = Lines()
        self._scanner = StopScanner(reply.stops)
        self._generated: list[str] = []
        self._prompt_tokens: int | None = None
        self._completion_tokens: int | None = None
        self._events = 0
        self._failed = False

    def feed(self, chunk: bytes) -> bytes:
        if self._failed:
            return b""
        out: list[bytes] = []
        for line in self._lines.feed(chunk):
            payload = sse_data(line)
            if payload is None:
                continue
            event = decode_event(payload, "Triton")
            if isinstance(event, dict) and "error" in event:
                self._failed = True
                out.append(OpenAIAnswer.error_event(500, str(event["error"]) or "Triton stream failed."))
                break
            piece = _text(event)
            self._events += 1
            self._generated.append(piece)
            prompt_tokens = _count(event, "num_input_tokens")
            if prompt_tokens is not None:
                self._prompt_tokens = prompt_tokens
            completion_tokens = _count(event, "num_output_tokens")
            if completion_tokens is not None:
                self._completion_tokens = (self._completion_tokens or 0) + completion_tokens
            out.append(self._reply.answer.delta(self._scanner.feed(piece)))
        return b"".join(out)

    def end(self) -> bytes:
        """The closing events once Triton closed the stream after a whole event; b"" after an error,
        with no event, or with an event left unfinished (a cut stream)."""
        if self._failed or not self._events or self._lines.rest.strip():
            return b""
        reply = self._reply
        tail = reply.answer.delta(self._scanner.flush())
        prompt_tokens = self._prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = _estimate(reply.prompt)
        completion_tokens = self._completion_tokens
        if completion_tokens is None:
            completion_tokens = _estimate("".join(self._generated))
        finish = _finish(self._scanner.stopped, completion_tokens, reply.max_tokens)
        return tail + reply.answer.finish(finish, prompt_tokens, completion_tokens)
