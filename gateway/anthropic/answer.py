"""A chat completion as the Messages API's message.

``content``: the text (when there is any), then one ``tool_use`` block per tool call (``arguments``
parsed back into ``input``). ``stop_reason``: ``stop`` -> ``end_turn`` (``stop_sequence`` when the
server says which of the request's stop strings ended it, as vLLM and the reference engine do in
``stop_reason``), ``length`` -> ``max_tokens``, ``tool_calls`` -> ``tool_use``. ``usage``: Anthropic
counts cache reads apart from ``input_tokens``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.errors import UpstreamProtocolError

__all__ = ["message_id", "stop_reason", "to_message", "usage"]

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
}


def message_id(chat_id: Any) -> str:
    """``msg_`` and the chat completion's own id (so logs on both sides match)."""
    text = str(chat_id or "")
    return text if text.startswith("msg_") else "msg_" + text.removeprefix("chatcmpl-")


def stop_reason(finish_reason: Any, matched: Any, stop: list[str] | None) -> tuple[str | None, str | None]:
    """(``stop_reason``, ``stop_sequence``) for a choice's finish reason and matched stop string."""
    if finish_reason == "stop" and isinstance(matched, str) and stop and matched in stop:
        return "stop_sequence", matched
    if finish_reason is None:
        return None, None
    return _STOP_REASONS.get(finish_reason, "end_turn"), None


def usage(chat_usage: Any) -> dict[str, int]:
    """Anthropic's usage of a chat ``usage`` object (cache reads apart from ``input_tokens``)."""
    if not isinstance(chat_usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    prompt = int(chat_usage.get("prompt_tokens") or 0)
    details = chat_usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return {
        "input_tokens": prompt - cached,
        "output_tokens": int(chat_usage.get("completion_tokens") or 0),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def _input(arguments: Any) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(arguments) if isinstance(arguments, str) and arguments else {}
    except msgspec.DecodeError:
        return {"_raw_arguments": arguments}  # what the model wrote, not valid JSON: kept, never lost
    return value if isinstance(value, dict) else {"value": value}


def to_message(payload: bytes, stop: list[str] | None = None) -> bytes:
    """The Messages answer for a chat completion body (its first choice)."""
    try:
        chat = msgspec.json.decode(payload)
        choice = chat["choices"][0]
        message = choice.get("message") or {}
    except (msgspec.DecodeError, KeyError, IndexError, TypeError, AttributeError):
        raise UpstreamProtocolError("upstream returned a body that is not a chat completion") from None
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "",
                "name": function.get("name") or "",
                "input": _input(function.get("arguments")),
            }
        )
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), stop)
    answer = {
        "id": message_id(chat.get("id")),
        "type": "message",
        "role": "assistant",
        "model": chat.get("model"),
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(chat.get("usage")),
    }
    return msgspec.json.encode(answer)
