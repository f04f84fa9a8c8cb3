"""Replies with tool calls (and without), shared by the parser, stream and HTTP tests."""

from __future__ import annotations

import json
from typing import Any

from backends.serving.tools.markup import call_block

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
"""A schema whose every value is short, so even random weights under the mask finish a call."""
TIME: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS: Any = [  # Any: the openai SDK takes it as its own tool type
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The forecast", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]

ONE = call_block("get_weather", {"city": "Paris", "days": 3})
TWO = ONE + "\n" + call_block("get_time", {"zone": "UTC"})
REPLIES: dict[str, str] = {
    "plain": "The weather is fine.",
    "one": ONE,
    "two": TWO,
    "text_around": "Let me look.\n" + ONE + "\nDone, ünïcode 😀 after.",
    "compact": '<tool_call>{"name":"get_time","arguments":{"zone":"CET"}}</tool_call>',
    "arguments_first": '<tool_call>\n{"arguments": {"zone": "UTC"}, "name": "get_time"}\n</tool_call>',
    "nested": call_block("f", {"a": {"b": [1, {"c": "}</x>"}]}, "d": "<tool"}),
    "unclosed": 'Sure <tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}',
    "pretty": '<tool_call>\n{\n  "name": "get_time",\n  "arguments": {\n    "zone": "UTC"\n  }\n}\n'
    "</tool_call>\n",
    "string_arguments": '<tool_call>{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}</tool_call>',
    "lone_open_tag_text": "a < b and <tool_ is not a tag",
}
MALFORMED: dict[str, str] = {
    "not_json": "<tool_call>\nnot json at all\n</tool_call>",
    "no_name": '<tool_call>{"arguments": {}}</tool_call>',
    "array_arguments": '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
}
CUT = 'Hi <tool_call>\n{"name": "get_time", "arguments": {"zone": "U'
"""A reply cut by ``max_tokens`` inside a call's arguments."""


def arguments_of(text: str) -> Any:
    return json.loads(text)
