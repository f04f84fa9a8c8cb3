"""A chat completion as a Responses API ``Response`` object: ``ResponseDraft``.

The draft knows the request (its settings are echoed: ``instructions``, ``tools``, ``temperature``,
...), the response's id (``resp_...``) and when it started; ``complete(chat)`` turns a chat completion
into the finished response: the choice's text as a ``message`` item with an ``output_text`` part, each
tool call as a ``function_call`` item (``call_id`` the chat call's id, ``fc_...`` its own), ``usage`` in
the API's names, and ``status`` ``incomplete`` (``incomplete_details.reason``: ``max_output_tokens``,
``content_filter``) where the chat finish reason says the text was cut.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec

from gateway.errors import UpstreamProtocolError

__all__ = ["ResponseDraft", "new_id", "usage_of"]

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""Chat finish reasons that leave a response incomplete, and the API's reason."""
_ECHOED = ("instructions", "max_output_tokens", "temperature", "top_p", "user", "max_tool_calls")


def new_id(prefix: str) -> str:
    """An id in OpenAI's style: ``resp_...``, ``msg_...``, ``fc_...``."""
    return f"{prefix}_{secrets.token_hex(24)}"


def usage_of(chat_usage: Any) -> dict[str, Any] | None:
    """A chat ``usage`` in the Responses API's names."""
    if not isinstance(chat_usage, dict):
        return None
    num_input = int(chat_usage.get("prompt_tokens") or 0)
    num_output = int(chat_usage.get("completion_tokens") or 0)
    prompt_details = chat_usage.get("prompt_tokens_details") or {}
    output_details = chat_usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": num_input,
        "input_tokens_details": {
            "cached_tokens": int(prompt_details.get("cached_tokens") or 0),
            "cache_write_tokens": 0,
        },
        "output_tokens": num_output,
        "output_tokens_details": {"reasoning_tokens": int(output_details.get("reasoning_tokens") or 0)},
        "total_tokens": num_input + num_output,
    }


def message_item(item_id: str, text: str, *, status: str = "completed") -> dict[str, Any]:
    """An assistant ``message`` output item (no part while it is in progress and empty)."""
    content = [] if status == "in_progress" else [text_part(text)]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(
    item_id: str, call_id: str, name: str, arguments: str, *, status: str = "completed"
) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class ResponseDraft:
    """The response being made for one Responses request (``request``: its body as the client sent it,
    the model already the served one)."""

    def __init__(self, request: dict[str, Any], *, response_id: str | None = None) -> None:
        self.request = request
        self.id = response_id or new_id("resp")
        self.created_at = int(time.time())

    def shell(self, model: str, *, status: str = "in_progress") -> dict[str, Any]:
        """The response's fields before any output: the request's settings echoed."""
        request = self.request
        text = request.get("text") if isinstance(request.get("text"), dict) else None
        response: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": model or str(request.get("model", "")),
            "output": [],
            "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
            "previous_response_id": request.get("previous_response_id"),
            "reasoning": None,
            "store": request.get("store", True) is not False,
            "text": text or {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice") or "auto",
            "tools": request.get("tools") or [],
            "truncation": "disabled",
            "metadata": request.get("metadata") or {},
            "usage": None,
        }
        for name in _ECHOED:
            response[name] = request.get(name)
        return response

    def finish(
        self,
        model: str,
        output: list[dict[str, Any]],
        finish_reason: str | None,
        usage: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The finished response."""
        reason = _INCOMPLETE.get(finish_reason or "")
        response = self.shell(model, status="incomplete" if reason else "completed")
        response["output"] = output
        response["usage"] = usage
        if reason:
            response["incomplete_details"] = {"reason": reason}
        return response

    def complete(self, payload: bytes) -> bytes:
        """A chat completion's JSON as the response's JSON."""
        try:
            chat = msgspec.json.decode(payload)
            choice = chat["choices"][0]
            message = choice.get("message") or {}
        except (msgspec.DecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise UpstreamProtocolError("upstream returned a body that is not a chat completion") from None
        output: list[dict[str, Any]] = []
        content = message.get("content")
        if isinstance(content, str) and content:
            output.append(message_item(new_id("msg"), content))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            call_id = call.get("id") or new_id("call")
            name, arguments = str(function.get("name", "")), str(function.get("arguments") or "")
            output.append(call_item(new_id("fc"), call_id, name, arguments))
        finish_reason = choice.get("finish_reason")
        if not output:  # an empty answer is still one (empty) message
            output.append(message_item(new_id("msg"), ""))
        response = self.finish(str(chat.get("model", "")), output, finish_reason, usage_of(chat.get("usage")))
        return msgspec.json.encode(response)
