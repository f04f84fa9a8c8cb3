"""A chat completions stream as the Responses API's event stream: ``ResponseEvents``.

Fed the chat stream's SSE bytes as they arrive, it answers the typed events the SDK expects, each
with its ``sequence_number``::

    response.created, response.in_progress
    text:       response.output_item.added (message), response.content_part.added,
                response.output_text.delta ..., response.output_text.done,
                response.content_part.done, response.output_item.done
    tool call:  response.output_item.added (function_call), response.function_call_arguments.delta ...,
                response.function_call_arguments.done, response.output_item.done
                (each call's item is done before the next call's is added, as OpenAI's own stream has it;
                a chat stream that goes back to an earlier call is an upstream protocol error)
    response.completed (or response.incomplete), with the output and the usage

The final event goes out at the chat stream's ``[DONE]``; a chat stream cut off before it stays cut
off (``end`` answers nothing, and the relay reports the cut). A chat ``error`` event becomes the API's
``error`` event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.adapters.responses.answer import (
    ResponseDraft,
    call_item,
    message_item,
    new_id,
    text_part,
    usage_of,
)
from gateway.errors import UpstreamProtocolError

__all__ = ["ResponseEvents"]

_encode = msgspec.json.encode


class _Call:
    """One tool call being streamed."""

    def __init__(self, output_index: int, call_id: str, name: str) -> None:
        self.output_index = output_index
        self.item_id = new_id("fc")
        self.call_id = call_id
        self.name = name
        self.arguments: list[str] = []

    def item(self, status: str) -> dict[str, Any]:
        return call_item(self.item_id, self.call_id, self.name, "".join(self.arguments), status=status)


class ResponseEvents:
    """One stream's translation (``StreamTranslator``): chat SSE bytes in, Responses SSE bytes out."""

    def __init__(self, draft: ResponseDraft) -> None:
        self.draft = draft
        self.model = ""
        self.sequence_number = 0
        self.output: list[dict[str, Any]] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.is_done = False
        self._buffer = b""
        self._started = False
        self._text: list[str] | None = None  # the open message's text
        self._text_item = ""
        self._calls: dict[int, _Call] = {}  # chat tool-call index -> its item, while open
        self._closed: set[int] = set()  # the chat tool-call indices whose items are done
        self._out: list[bytes] = []

    # ------------------------------------------------------------------ the StreamTranslator protocol

    def feed(self, chunk: bytes) -> bytes:
        data = (self._buffer + chunk).replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self._buffer = data
            return b""
        self._buffer = data[end + 2 :]
        for event in data[:end].split(b"\n\n"):
            self._event(event)
        out, self._out = b"".join(self._out), []
        return out

    def end(self) -> bytes:
        return b""  # [DONE] ends the stream; without it the stream was cut

    # ------------------------------------------------------------------ reading the chat stream

    def _event(self, event: bytes) -> None:
        lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if not lines or self.is_done:
            return  # comments, keep-alives
        payload = b"\n".join(lines)
        if payload == b"[DONE]":
            self._complete()
            return
        try:
            chunk = msgspec.json.decode(payload)
        except msgspec.DecodeError:
            raise UpstreamProtocolError("upstream sent an event that is not JSON") from None
        if not isinstance(chunk, dict):
            raise UpstreamProtocolError("upstream sent an event that is not a chat chunk")
        if "error" in chunk:
            self._error(chunk["error"])
            return
        self.model = self.model or str(chunk.get("model") or "")
        self._start()
        if chunk.get("usage"):
            self.usage = usage_of(chunk["usage"])
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text_delta(content)
            for call in delta.get("tool_calls") or ():
                self._call_delta(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                self._close_text()
                self._close_calls()

    # ------------------------------------------------------------------ writing the Responses stream

    def _emit(self, kind: str, **fields: Any) -> None:
        body = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        self._out.append(b"event: " + kind.encode() + b"\ndata: " + _encode(body) + b"\n\n")

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        shell = self.draft.shell(self.model)
        self._emit("response.created", response=shell)
        self._emit("response.in_progress", response=shell)

    def _text_delta(self, content: str) -> None:
        if self._text is None:
            self._close_calls()
            self._text, self._text_item = [], new_id("msg")
            index = len(self.output)
            self.output.append(message_item(self._text_item, "", status="in_progress"))
            self._emit("response.output_item.added", output_index=index, item=self.output[index])
            part = text_part("")
            self._emit(
                "response.content_part.added",
                item_id=self._text_item,
                output_index=index,
                content_index=0,
                part=part,
            )
        self._text.append(content)
        self._emit(
            "response.output_text.delta",
            item_id=self._text_item,
            output_index=len(self.output) - 1,
            content_index=0,
            delta=content,
            logprobs=[],
        )

    def _close_text(self) -> None:
        if self._text is None:
            return
        text, index, item_id = "".join(self._text), len(self.output) - 1, self._text_item
        self._text = None
        ids = {"item_id": item_id, "output_index": index, "content_index": 0}
        self._emit("response.output_text.done", **ids, text=text, logprobs=[])
        self._emit("response.content_part.done", **ids, part=text_part(text))
        self.output[index] = message_item(item_id, text)
        self._emit("response.output_item.done", output_index=index, item=self.output[index])

    def _call_delta(self, delta: dict[str, Any]) -> None:
        index = int(delta.get("index") or 0)
        function = delta.get("function") or {}
        call = self._calls.get(index)
        if call is None:
            if index in self._closed:
                raise UpstreamProtocolError(f"upstream went back to tool call {index} after the next began")
            self._close_text()
            self._close_calls()  # chat servers stream calls one after another: the one before is whole
            call = _Call(
                len(self.output), str(delta.get("id") or new_id("call")), str(function.get("name") or "")
            )
            self._calls[index] = call
            self.output.append(call.item("in_progress"))
            self._emit("response.output_item.added", output_index=call.output_index, item=self.output[-1])
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            self._emit(
                "response.function_call_arguments.delta",
                item_id=call.item_id,
                output_index=call.output_index,
                delta=arguments,
            )

    def _close_calls(self) -> None:
        for call in self._calls.values():
            item = call.item("completed")
            self.output[call.output_index] = item
            self._emit(
                "response.function_call_arguments.done",
                item_id=call.item_id,
                output_index=call.output_index,
                name=call.name,
                arguments=item["arguments"],
            )
            self._emit("response.output_item.done", output_index=call.output_index, item=item)
        self._closed.update(self._calls)
        self._calls = {}

    def _complete(self) -> None:
        self._start()
        self._close_text()
        self._close_calls()
        self.is_done = True
        if not self.output:
            item = message_item(new_id("msg"), "")
            self.output.append(item)
            self._emit("response.output_item.added", output_index=0, item=item)
            self._emit("response.output_item.done", output_index=0, item=item)
        response = self.draft.finish(self.model, self.output, self.finish_reason, self.usage)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        self._emit(kind, response=response)

    def _error(self, error: Any) -> None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        self.is_done = True
        self._emit(
            "error",
            code=error.get("code"),
            message=str(error.get("message") or "upstream error"),
            param=error.get("param"),
        )
