"""A finished reply's ``<tool_call>`` blocks as OpenAI tool calls, and the text around them as content.

Each block holds one JSON object ``{"name": ..., "arguments": {...}}``; a block left open at the end of
the reply (the model stopped before ``</tool_call>``) is read too, as vLLM's Hermes parser does. A
block left open inside its arguments (the reply was cut by ``max_tokens``) is the call with the
arguments written so far, as OpenAI answers a call cut by the token limit and as the stream has
already sent it (``stream.py``), not the markup as text. If any other block does not parse, the reply
is not a call: the whole text comes back as content, never an error.
Content is trimmed of surrounding whitespace (the newline before a call), as a stream sends it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from backends.serving.tools.markup import (
    CALL_HEADER,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    arguments_so_far,
    held_prefix_length,
)

_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One call: the function's name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A reply split into its text (None when there is none) and its calls."""

    content: str | None
    calls: tuple[ParsedCall, ...] = ()


def new_call_id() -> str:
    """An OpenAI-style call id (``call_`` and 24 hex digits)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_call_body(body: str) -> ParsedCall | None:
    """The call inside one block's tags, or None if it is no ``{"name": str, "arguments": object}``."""
    try:
        value: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def _cut_call(body: str) -> ParsedCall | None:
    """A block the reply ended inside of: the whole call if only its close tag was cut, else, in the
    usual form up to its arguments, the call with the argument text written so far (not JSON yet)."""
    whole = parse_call_body(body[: len(body) - held_prefix_length(body, TOOL_CALL_CLOSE)])
    if whole is not None:
        return whole
    header = CALL_HEADER.match(body)
    if header is None or body[header.end() : header.end() + 1] != "{":
        return None
    try:
        name = json.loads(f'"{header.group(1)}"')
    except ValueError:
        return None
    return ParsedCall(name, arguments_so_far(body[header.end() :])) if name else None


def parse_tool_calls(text: str, max_calls: int | None = None) -> ParsedReply:
    """Split a finished reply into content and calls; text with a malformed block is all content.

    Calls after the first ``max_calls`` are dropped (``parallel_tool_calls: false`` allows one)."""
    if TOOL_CALL_OPEN not in text:
        return ParsedReply(text.strip() or None)
    calls: list[ParsedCall] = []
    outside: list[str] = []
    position = 0
    for match in _BLOCK.finditer(text):
        call = parse_call_body(match.group(1))
        if call is None and match.end() == len(text) and not match.group(0).endswith(TOOL_CALL_CLOSE):
            call = _cut_call(match.group(1))
        if call is None:
            return ParsedReply(text)
        calls.append(call)
        outside.append(text[position : match.start()])
        position = match.end()
    outside.append(text[position:])
    content = "".join(outside).strip()
    return ParsedReply(content or None, tuple(calls[:max_calls]))
