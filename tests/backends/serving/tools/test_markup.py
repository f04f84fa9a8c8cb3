"""The Hermes markup: a whole call is its prefix, compact JSON arguments and its suffix."""

from __future__ import annotations

import json

from backends.serving.tools.markup import CALL_SUFFIX, call_block, call_prefix, response_block


def test_a_call_block_is_prefix_arguments_suffix() -> None:
    block = call_block("get_time", {"zone": "UTC"})
    assert block == '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    assert block.startswith(call_prefix("get_time")) and block.endswith(CALL_SUFFIX)
    inner = block.removeprefix("<tool_call>").removesuffix("</tool_call>")
    assert json.loads(inner) == {"name": "get_time", "arguments": {"zone": "UTC"}}


def test_a_name_is_written_as_a_json_string() -> None:
    assert call_prefix('we"ird').endswith('{"name": "we\\"ird", "arguments": ')


def test_a_response_block() -> None:
    assert response_block("42") == "<tool_response>\n42\n</tool_response>"
