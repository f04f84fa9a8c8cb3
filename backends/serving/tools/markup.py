"""The Hermes tool-call markup (Hermes 2 Pro, Qwen 2.5/3): one call is a JSON object in ``<tool_call>`` tags.

::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

The prompt fallback writes past calls this way, the parser reads them, and a forced call is constrained
to exactly this text, so all three share these strings.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"


def call_prefix(name: str) -> str:
    """A call's text up to its arguments: ``<tool_call>\\n{"name": "NAME", "arguments": ``."""
    return f'{TOOL_CALL_OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '


CALL_SUFFIX = "}\n" + TOOL_CALL_CLOSE
"""A call's text after its arguments."""

CALL_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
"""The usual start of a call inside its tags, ``{"name": "NAME", "arguments": ``; group 1 is the name
as JSON string text."""


def without_closing_brace(text: str) -> str:
    """A call's argument text without the ``}`` (and spaces) that close the call's object."""
    text = text.rstrip()
    if text.endswith("}"):
        text = text[:-1].rstrip()
    return text


def held_prefix_length(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``marker`` (it may grow into it)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def arguments_so_far(text: str) -> str:
    """The argument text of a call the reply ended inside of: without a ``</tool_call>`` begun at its
    end, nor the ``}`` that closes the call's object."""
    return without_closing_brace(text[: len(text) - held_prefix_length(text, TOOL_CALL_CLOSE)])


def call_block(name: str, arguments: Any) -> str:
    """One whole call: prefix, the arguments as compact JSON, suffix."""
    return call_prefix(name) + json.dumps(arguments, ensure_ascii=False) + CALL_SUFFIX


def response_block(content: str) -> str:
    """A tool's result as the model reads it back."""
    return f"{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}"
