"""llama.cpp's answers as OpenAI's: the native ``/completion`` answer and its stream as a text
completion, the OpenAI mode's answers with the request's model, and llama.cpp's errors.

The native answer's ``content`` is the text; usage is ``tokens_evaluated`` (the whole prompt, the part
the prompt cache served included: ``timings``' ``prompt_n`` counts only what was computed) and
``tokens_predicted``; ``stop_type`` ``eos`` or ``word`` finishes ``stop``, ``limit`` finishes
``length`` (older servers: ``stopped_eos``, ``stopped_word``, ``stopped_limit``). A stream's
``data:`` events carry ``content`` pieces, the last one ``"stop": true`` and the counts.

Errors (``{"error": {"code", "message", "type"}}``, also as a ``data:`` event mid-stream) become
OpenAI envelopes with the status kept and llama.cpp's ``type`` (``exceed_context_size_error``, ...)
as the ``code``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.adapters.shapes import DONE, Lines, OpenAIAnswer, decode_event, error_body, sse_data
from gateway.errors import UpstreamProtocolError

__all__ = ["CompletionTranslator", "OpenAIModeTranslator"]

_encode = msgspec.json.encode
_WHAT = "llama.cpp"
_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}


def _count(answer: dict[str, Any], name: str, timing: str) -> int:
    value = answer.get(name)
    if type(value) is int:
        return value
    timings = answer.get("timings")
    if isinstance(timings, dict) and type(timings.get(timing)) is int:
        # timings.prompt_n counts only the prompt tokens computed; cache_n holds the rest
        extra = timings.get("cache_n", 0) if timing == "prompt_n" else 0
        return int(timings[timing]) + (extra if type(extra) is int else 0)
    raise UpstreamProtocolError(f"{_WHAT} sent a finished answer without `{name}`")


def _usage(answer: dict[str, Any]) -> tuple[int, int]:
    return _count(answer, "tokens_evaluated", "prompt_n"), _count(answer, "tokens_predicted", "predicted_n")


def _finish_reason(answer: dict[str, Any]) -> str:
    stop_type = answer.get("stop_type")
    if isinstance(stop_type, str):
        return _FINISH.get(stop_type, "stop")
    return "length" if answer.get("stopped_limit") is True else "stop"


def _event(payload: bytes) -> dict[str, Any]:
    event = decode_event(payload, _WHAT)
    if not isinstance(event, dict):
        raise UpstreamProtocolError(f"{_WHAT} sent an answer that is not a JSON object")
    return event


def _text(answer: dict[str, Any]) -> str:
    content = answer.get("content", "")
    if not isinstance(content, str):
        raise UpstreamProtocolError(f"{_WHAT} sent a `content` that is not text")
    return content


def _error_fields(error: Any, status: int) -> tuple[int, str | None, str | None]:
    """Status, message and llama.cpp's ``type`` of an ``error`` value (an object or a bare string)."""
    if isinstance(error, str):
        return status, error, None
    if not isinstance(error, dict):
        return status, None, None
    code, message, kind = error.get("code"), error.get("message"), error.get("type")
    if type(code) is int and 400 <= code <= 599:
        status = code
    return status, message if isinstance(message, str) else None, kind if isinstance(kind, str) else None


def _error(status: int, payload: bytes) -> bytes:
    """llama.cpp's error body (or any text) as an OpenAI envelope, ``status`` kept."""
    message: str | None = None
    kind: str | None = None
    try:
        document = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        document = None
    if isinstance(document, dict) and "error" in document:
        _, message, kind = _error_fields(document["error"], status)
    if not message:
        message = payload.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    return error_body(status, message, code=kind or "upstream_status")


def _error_event(error: Any) -> bytes:
    status, message, kind = _error_fields(error, 500)
    body = error_body(status, message or f"{_WHAT} failed mid-stream", code=kind or "upstream_error")
    return b"data: " + body + b"\n\n"


class CompletionTranslator:
    """A native ``/completion`` answer as an OpenAI text completion."""

    def __init__(self, model: str) -> None:
        self.model = model

    def body(self, payload: bytes) -> bytes:
        answer = _event(payload)
        prompt_tokens, completion_tokens = _usage(answer)
        openai = OpenAIAnswer(self.model, chat=False)
        return openai.body(_text(answer), _finish_reason(answer), prompt_tokens, completion_tokens)

    def error(self, status: int, payload: bytes) -> bytes:
        return _error(status, payload)

    def stream(self) -> _CompletionStream:
        return _CompletionStream(OpenAIAnswer(self.model, chat=False))


class _CompletionStream:
    """Native ``data:`` events in, OpenAI text-completion chunks out."""

    def __init__(self, answer: OpenAIAnswer) -> None:
        self._answer = answer
        self._lines = Lines()
        self._ended = False

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for line in self._lines.feed(chunk):
            payload = sse_data(line)
            if payload is None or self._ended:
                continue
            event = _event(payload)
            if "error" in event:
                out.append(_error_event(event["error"]))
                self._ended = True
                continue
            out.append(self._answer.delta(_text(event)))
            if event.get("stop") is True:
                out.append(self._answer.finish(_finish_reason(event), *_usage(event)))
                self._ended = True
        return b"".join(out)

    def end(self) -> bytes:
        return b""  # the finish went out with the last event; without it the stream was cut


class OpenAIModeTranslator:
    """llama.cpp's OpenAI mode: its answer as it is, naming the request's model; errors normalised."""

    def __init__(self, model: str) -> None:
        self.model = model

    def body(self, payload: bytes) -> bytes:
        answer = _event(payload)
        if "model" in answer:
            answer["model"] = self.model
        return _encode(answer)

    def error(self, status: int, payload: bytes) -> bytes:
        return _error(status, payload)

    def stream(self) -> _OpenAIModeStream:
        return _OpenAIModeStream(self.model)


class _OpenAIModeStream:
    """Each ``data:`` event passed on as its own event, ``model`` set, an error event normalised."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._lines = Lines()

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for line in self._lines.feed(chunk):
            payload = sse_data(line)
            if payload is None:
                continue
            if payload.strip() == b"[DONE]":
                out.append(DONE)
                continue
            event = _event(payload)
            if "error" in event:
                out.append(_error_event(event["error"]))
                continue
            if "model" in event:
                event["model"] = self.model
            out.append(b"data: " + _encode(event) + b"\n\n")
        return b"".join(out)

    def end(self) -> bytes:
        return b""  # [DONE] went out as it came; without it the stream was cut
