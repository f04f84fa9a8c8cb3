"""TGI's answers as OpenAI's: ``/generate_stream``'s events as a text completion, the Messages API's
chat answer with TGI's differences rewritten; plain and streamed.

``/generate_stream`` (``/completions``): ``data:{"index", "token": {"id", "text", "logprob",
"special"}, "generated_text": null, "details": null}`` per token (special tokens carry no text), the
last event with ``generated_text`` and ``details`` (``finish_reason`` ``length`` | ``eos_token`` |
``stop_sequence``, ``generated_tokens``, ``input_length``). TGI keeps the stop string at the end of the
text, so the text is cut before the first stop string (``gateway.adapters.stop``); finish ``length``
stays ``length``, ``eos_token``, ``stop_sequence`` or a cut stop string are ``stop``. Usage:
``input_length`` prompt tokens, ``generated_tokens`` completion tokens. A plain answer is the stream
folded into one body.

The Messages API (``/chat/completions``): the answer passes, except that it names the body's model
(TGI names its own model for ``tgi``), gets an id where TGI sends ``""``, has finish
``stop_sequence`` (TGI's) as ``stop`` and the content cut before the stop string.

Error events and error bodies read as ``gateway.adapters.tgi.errors`` says.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from gateway.adapters.shapes import Lines, OpenAIAnswer, decode_event, sse_data
from gateway.adapters.stop import StopScanner, cut_at_stop
from gateway.adapters.tgi.errors import envelope, error_data, read_error, translate_error
from gateway.errors import UpstreamError, UpstreamProtocolError, UpstreamStatusError

__all__ = ["GenerateStream", "GenerateTranslator", "MessagesStream", "MessagesTranslator"]

_WHAT = "TGI"
_encode = msgspec.json.encode
_FINISH = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}


# --- /completions: /generate_stream ------------------------------------------------------------------


def _token_text(event: dict[str, Any]) -> str:
    token = event.get("token")
    if not isinstance(token, dict) or not isinstance(token.get("text"), str):
        raise UpstreamProtocolError(f"{_WHAT} sent a stream event without a token")
    return "" if token.get("special") else str(token["text"])


def _details(event: dict[str, Any]) -> tuple[str, int, int]:
    """(TGI's finish reason, prompt tokens, completion tokens) of the last event."""
    details = event.get("details")
    if not isinstance(details, dict):
        raise UpstreamProtocolError(f"{_WHAT} sent a last event without details")
    reason, generated, prompt = (
        details.get("finish_reason"),
        details.get("generated_tokens"),
        details.get("input_length", 0),
    )
    if not isinstance(reason, str) or not isinstance(generated, int) or not isinstance(prompt, int):
        raise UpstreamProtocolError(f"{_WHAT} sent malformed details")
    return reason, prompt, generated


def _is_last(event: dict[str, Any]) -> bool:
    return event.get("details") is not None or event.get("generated_text") is not None


def _events(lines: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for line in lines:
        payload = sse_data(line)
        if payload is None:  # blank separators, comments
            continue
        event = decode_event(payload, _WHAT)
        if not isinstance(event, dict):
            raise UpstreamProtocolError(f"{_WHAT} sent an event that is not a JSON object")
        events.append(event)
    return events


class GenerateTranslator:
    """``/generate_stream``'s answer as an OpenAI text completion (plain: the stream folded)."""

    def __init__(self, model: str, stops: tuple[str, ...]) -> None:
        self.model = model
        self.stops = stops

    def body(self, payload: bytes) -> bytes:
        for event in _events(Lines().feed(payload + b"\n")):
            if "error" in event:
                status, message, kind = read_error(event["error"], event.get("error_type"))
                if status >= 500:
                    raise UpstreamError(f"{_WHAT} failed: {message}")
                raise UpstreamStatusError(status, envelope(status, message, kind), message)
            if _is_last(event):
                reason, prompt, generated = _details(event)
                text = event.get("generated_text")
                if not isinstance(text, str):
                    raise UpstreamProtocolError(f"{_WHAT} sent a last event without its text")
                text, stopped = cut_at_stop(text, self.stops)
                finish = "stop" if stopped else _FINISH.get(reason, "stop")
                return OpenAIAnswer(self.model, chat=False).body(text, finish, prompt, generated)
        raise UpstreamProtocolError(f"{_WHAT} ended its stream before its last event")

    def error(self, status: int, payload: bytes) -> bytes:
        return translate_error(status, payload)

    def stream(self) -> GenerateStream:
        return GenerateStream(OpenAIAnswer(self.model, chat=False), self.stops)


class GenerateStream:
    """One ``/generate_stream`` as OpenAI ``text_completion`` chunks, a usage chunk and ``[DONE]``."""

    def __init__(self, answer: OpenAIAnswer, stops: tuple[str, ...]) -> None:
        self._answer = answer
        self._lines = Lines()
        self._scanner = StopScanner(stops)
        self._over = False

    def feed(self, chunk: bytes) -> bytes:
        if self._over:
            return b""
        out = []
        for event in _events(self._lines.feed(chunk)):
            out.append(self._event(event))
            if self._over:
                break
        return b"".join(out)

    def _event(self, event: dict[str, Any]) -> bytes:
        if "error" in event:
            self._over = True  # the relay ends the client's stream after it
            return b"data: " + error_data(event) + b"\n\n"
        text = self._scanner.feed(_token_text(event))
        if not _is_last(event):
            return self._answer.delta(text)
        self._over = True
        reason, prompt, generated = _details(event)
        text += self._scanner.flush()
        finish = "stop" if self._scanner.stopped else _FINISH.get(reason, "stop")
        return self._answer.delta(text) + self._answer.finish(finish, prompt, generated)

    def end(self) -> bytes:
        return b""  # the last event already closed the stream; without it the stream was cut off


# --- /chat/completions: the Messages API ------------------------------------------------------------


class _MessagesAnswer:
    """What is rewritten in one Messages API answer: its model, id, finish reasons, stop strings."""

    def __init__(self, model: str, stops: tuple[str, ...]) -> None:
        self.model = model
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.scanner = StopScanner(stops)

    def document(self, document: dict[str, Any], field: str) -> bytes:
        """``document`` (a response or a chunk; its choices' ``field`` holds the text) rewritten."""
        document["model"] = self.model
        if not document.get("id"):
            document["id"] = self.id
        choices = document.get("choices")
        if not isinstance(choices, list):
            raise UpstreamProtocolError(f"{_WHAT} sent a chat answer without choices")
        for choice in choices:
            if not isinstance(choice, dict):
                raise UpstreamProtocolError(f"{_WHAT} sent a malformed choice")
            self._choice(choice, choice.get(field))
        return _encode(document)

    def _choice(self, choice: dict[str, Any], message: Any) -> None:
        content = message.get("content") if isinstance(message, dict) else None
        text = self.scanner.feed(content) if isinstance(content, str) else ""
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            text += self.scanner.flush()
            choice["finish_reason"] = "stop" if self.scanner.stopped else _FINISH.get(reason, reason)
        if isinstance(message, dict) and (isinstance(content, str) or text):
            message["content"] = text


def _chat_document(payload: bytes) -> dict[str, Any]:
    document = decode_event(payload, _WHAT)
    if not isinstance(document, dict):
        raise UpstreamProtocolError(f"{_WHAT} sent a chat answer that is not a JSON object")
    return document


class MessagesTranslator:
    """The Messages API's OpenAI answer, with TGI's differences rewritten (see the module's docstring)."""

    def __init__(self, model: str, stops: tuple[str, ...]) -> None:
        self.model = model
        self.stops = stops

    def body(self, payload: bytes) -> bytes:
        return _MessagesAnswer(self.model, self.stops).document(_chat_document(payload), "message")

    def error(self, status: int, payload: bytes) -> bytes:
        return translate_error(status, payload)

    def stream(self) -> MessagesStream:
        return MessagesStream(_MessagesAnswer(self.model, self.stops))


class MessagesStream:
    """The Messages API's stream, event by event: chunks rewritten, error events as OpenAI's, the rest
    (``[DONE]``, keep-alive comments, blank separators) as it is."""

    def __init__(self, answer: _MessagesAnswer) -> None:
        self._answer = answer
        self._lines = Lines()

    def feed(self, chunk: bytes) -> bytes:
        out = []
        for line in self._lines.feed(chunk):
            payload = sse_data(line)
            if payload is None or payload.strip() == b"[DONE]":
                out.append(line + b"\n")
                continue
            document = _chat_document(payload)
            if "error" in document and "choices" not in document:
                data = error_data(document)
            else:
                data = self._answer.document(document, "delta")
            out.append(b"data: " + data + b"\n")  # the blank line that ends the event follows
        return b"".join(out)

    def end(self) -> bytes:
        return b""  # TGI's own [DONE] ended the stream, or it was cut off
