"""A chat completions stream as the Messages API's event stream.

Anthropic's sequence: ``message_start`` (the message, empty), ``ping``, then per content block
``content_block_start`` / ``content_block_delta`` ... / ``content_block_stop`` (text as ``text_delta``,
a tool call as a ``tool_use`` block whose ``input`` arrives as ``input_json_delta`` pieces), then
``message_delta`` (``stop_reason`` and the usage) and ``message_stop``. The chat stream's usage chunk
(the Messages route always asks for it) gives the usage; an error event in the chat stream becomes
Anthropic's ``error`` event. ``MessagesStream.feed`` takes the chat stream's bytes as the gateway sends
them and returns the Messages stream's bytes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.anthropic.answer import message_id, stop_reason, usage
from gateway.anthropic.errors import error_event

__all__ = ["MessagesStream"]


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


class MessagesStream:
    """One stream's translation; the chat events may arrive split anywhere."""

    def __init__(self, model: str, stop: list[str] | None = None) -> None:
        self.model = model
        self.stop = stop
        self._buffer = b""
        self._started = False
        self._ended = False
        self._block: int | None = None
        """The index of the open content block; None when none is open."""
        self._block_kind: str | None = None
        self._num_blocks = 0
        self._calls: dict[int, int] = {}
        """A chat tool call's index -> its content block's index."""
        self._finish: tuple[str | None, str | None] = (None, None)
        self._usage: dict[str, int] | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The Messages events for what ``chunk`` completes (b"" while an event is incomplete)."""
        data = self._buffer + chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._buffer = data
            return b""
        self._buffer = data[end + 2 :]
        out: list[bytes] = []
        for event in data[:end].split(b"\n\n"):
            payload = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if payload:
                out.append(self._on(payload))
        return b"".join(out)

    def _on(self, payload: bytes) -> bytes:
        if self._ended:
            return b""
        if payload == b"[DONE]":
            return self._finish_message()
        try:
            chunk = msgspec.json.decode(payload)
        except msgspec.DecodeError:
            return self._fail(502, "the upstream sent an event that is not JSON")
        if not isinstance(chunk, dict):
            return b""
        if "error" in chunk:
            error = chunk["error"] if isinstance(chunk["error"], dict) else {}
            return self._fail(int(error.get("status") or 500), str(error.get("message") or "upstream error"))
        out = [] if self._started else [self._start(chunk)]
        if chunk.get("usage"):
            self._usage = usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                out.append(self._text(delta["content"]))
            for call in delta.get("tool_calls") or []:
                out.append(self._tool_call(call))
            if choice.get("finish_reason"):
                self._finish = stop_reason(choice["finish_reason"], choice.get("stop_reason"), self.stop)
        return b"".join(out)

    def _start(self, chunk: dict[str, Any]) -> bytes:
        self._started = True
        message: dict[str, Any] = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model") or self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return _event("message_start", {"type": "message_start", "message": message}) + _event(
            "ping", {"type": "ping"}
        )

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        closed = self._close()
        self._block, self._block_kind = self._num_blocks, kind
        self._num_blocks += 1
        start = {"type": "content_block_start", "index": self._block, "content_block": block}
        return closed + _event("content_block_start", start)

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        index, self._block = self._block, None
        return _event("content_block_stop", {"type": "content_block_stop", "index": index})

    def _text(self, text: str) -> bytes:
        opened = (
            b""
            if self._block_kind == "text" and self._block is not None
            else self._open("text", {"type": "text", "text": ""})
        )
        delta = {
            "type": "content_block_delta",
            "index": self._block,
            "delta": {"type": "text_delta", "text": text},
        }
        return opened + _event("content_block_delta", delta)

    def _tool_call(self, call: dict[str, Any]) -> bytes:
        index = int(call.get("index") or 0)
        function = call.get("function") or {}
        opened = b""
        if index not in self._calls:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.get("id") or "",
                "name": function.get("name") or "",
                "input": {},
            }
            opened = self._open("tool_use", block)
            self._calls[index] = self._num_blocks - 1
        arguments = function.get("arguments")
        if not arguments:
            return opened
        delta = {
            "type": "content_block_delta",
            "index": self._calls[index],
            "delta": {"type": "input_json_delta", "partial_json": arguments},
        }
        return opened + _event("content_block_delta", delta)

    def _finish_message(self) -> bytes:
        self._ended = True
        out = [] if self._started else [self._start({})]
        out.append(self._close())
        reason, sequence = self._finish
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason or "end_turn", "stop_sequence": sequence},
            "usage": self._usage or {"output_tokens": 0},
        }
        out.append(_event("message_delta", delta))
        out.append(_event("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def _fail(self, status: int, message: str) -> bytes:
        self._ended = True
        return error_event(status, message)
