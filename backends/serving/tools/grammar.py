"""The constraint that forces a call: an xgrammar structural tag over the Hermes call markup.

``required`` lets the reply be one call of any offered function, and with ``parallel_tool_calls`` (the
default) one or more calls, a newline apart; ``named`` is exactly one call of that function, as OpenAI
and vLLM answer it (a small model would otherwise repeat the call until ``max_tokens``). Each
call is exactly ``markup.call_prefix(name)``, then arguments that match the function's ``parameters``
schema, then ``markup.CALL_SUFFIX``; nothing else may be written, so the reply ends after the last
call. The engine's sampler masks tokens to it (``SamplingParams.structured``). ``auto`` and ``none``
are not constrained.
"""

from __future__ import annotations

import json
from typing import Any

from backends.engine.structured_output import StructuredOutput
from backends.serving.tools.markup import CALL_SUFFIX, call_prefix
from backends.serving.tools.spec import Tool, ToolRequest

MAX_WHITESPACE = 16
"""Most whitespace characters in a row inside the arguments: room for indented JSON, while a weak
model cannot spend its whole budget on spaces."""
CALL_SEPARATOR = "\n"


def forced_calls(tools: ToolRequest) -> StructuredOutput | None:
    """The constraint of a ``required`` or ``named`` choice; None for the others."""
    if not tools.is_forced:
        return None
    structural_tag = {"type": "structural_tag", "format": forced_calls_format(tools)}
    return StructuredOutput(structural_tag=json.dumps(structural_tag, ensure_ascii=False))


def forced_calls_format(tools: ToolRequest) -> dict[str, Any]:
    """The structural tag's format: the callable functions' tags, at least one; one only when named or
    not parallel."""
    return {
        "type": "tags_with_separator",
        "tags": [_call_tag(tool) for tool in tools.callable_tools()],
        "separator": CALL_SEPARATOR,
        "at_least_one": True,
        "stop_after_first": not tools.is_parallel or tools.mode == "named",
    }


def _call_tag(tool: Tool) -> dict[str, Any]:
    return {
        "type": "tag",
        "begin": call_prefix(tool.name),
        "content": {
            "type": "json_schema",
            "json_schema": tool.parameters,
            "max_whitespace_cnt": MAX_WHITESPACE,
        },
        "end": CALL_SUFFIX,
    }
