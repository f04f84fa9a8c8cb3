"""The OpenAI shapes a native answer is translated into, and the native framings it is read from.

- ``OpenAIAnswer``: one request's OpenAI identity (chat or text completion, id, created, model) and
  the documents it writes: a whole response (``body``), stream chunks (``delta``), the closing
  events (``finish``: the finishing chunk, the usage chunk, ``[DONE]``) and an error event.
- ``error_body``: an OpenAI error envelope for a backend's error text and status.
- ``Lines``: splits a byte stream into lines (NDJSON, or SSE ``data:`` payloads with ``sse_data``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec

from gateway.errors import UpstreamProtocolError

__all__ = ["DONE", "Lines", "OpenAIAnswer", "decode_event", "error_body", "error_type_of", "sse_data"]

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.encode
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type_of(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    return _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")


def error_body(
    status: int, message: str, *, code: str | None = "upstream_status", param: str | None = None
) -> bytes:
    """An OpenAI error envelope."""
    error = {"message": message, "type": error_type_of(status), "param": param, "code": code}
    return _encode({"error": error})


def decode_event(payload: bytes, what: str) -> Any:
    """One native JSON event or body; ``UpstreamProtocolError`` when it is not JSON."""
    try:
        return msgspec.json.decode(payload)
    except msgspec.DecodeError:
        raise UpstreamProtocolError(f"{what} sent something that is not JSON") from None


class Lines:
    """Complete lines of a byte stream, as its chunks arrive (``\\n`` or ``\\r\\n`` ended)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        return [line.rstrip(b"\r") for line in lines]

    @property
    def rest(self) -> bytes:
        """An unterminated last line (what a stream left when it closed)."""
        return self._pending


def sse_data(line: bytes) -> bytes | None:
    """The payload of an SSE ``data:`` line; None for any other line (blank, comment, ``event:``)."""
    if not line.startswith(b"data:"):
        return None
    return line[5:].lstrip(b" ")


class OpenAIAnswer:
    """The OpenAI documents of one request, chat (``chat.completion``) or text (``text_completion``)."""

    def __init__(self, model: str, *, chat: bool) -> None:
        self.model = model
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self._started = False

    def body(
        self,
        text: str,
        finish_reason: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        tool_calls: list[Any] | None = None,
    ) -> bytes:
        """A whole (non-stream) response with one choice."""
        choice: dict[str, Any]
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        document = {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": _usage(prompt_tokens, completion_tokens),
        }
        return _encode(document)

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
        document: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            document["usage"] = usage
        return b"data: " + _encode(document) + b"\n\n"

    def delta(self, text: str) -> bytes:
        """A chunk carrying ``text`` (b"" for empty text once the chat stream's role was sent)."""
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if not self._started:
                delta = {"role": "assistant", "content": text}
            elif not text:
                return b""
            self._started = True
            return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
        if not text:
            return b""
        return self._chunk([{"index": 0, "text": text, "logprobs": None, "finish_reason": None}])

    def finish(self, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The finishing chunk, the usage chunk and ``[DONE]``."""
        start = self.delta("") if self.chat and not self._started else b""
        if self.chat:
            last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}
        else:
            last = {"index": 0, "text": "", "logprobs": None, "finish_reason": finish_reason}
        usage = self._chunk([], _usage(prompt_tokens, completion_tokens))
        return start + self._chunk([last]) + usage + DONE

    @staticmethod
    def error_event(status: int, message: str) -> bytes:
        """An error event mid-stream (the relay ends the client's stream after it)."""
        return b"data: " + error_body(status, message, code="upstream_error") + b"\n\n"


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
