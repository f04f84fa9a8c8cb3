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


def call_block(name: str, arguments: Any) -> str:
    """One whole call: prefix, the arguments as compact JSON, suffix."""
    return call_prefix(name) + json.dumps(arguments, ensure_ascii=False) + CALL_SUFFIX


def response_block(content: str) -> str:
    """A tool's result as the model reads it back."""
    return f"{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}"
