"""Finished replies into content and calls; malformed calls come back as content, never an error."""

from __future__ import annotations

import json

import pytest

from backends.serving.tools.parser import ParsedCall, new_call_id, parse_call_body, parse_tool_calls
from tests.backends.serving.tools.samples import CUT, MALFORMED, ONE, TWO


def test_one_call_and_no_content() -> None:
    reply = parse_tool_calls(ONE)
    assert reply.content is None
    assert reply.calls == (ParsedCall("get_weather", '{"city": "Paris", "days": 3}'),)


def test_several_calls_in_order() -> None:
    reply = parse_tool_calls(TWO)
    assert [c.name for c in reply.calls] == ["get_weather", "get_time"]
    assert json.loads(reply.calls[1].arguments) == {"zone": "UTC"}


def test_one_call_only_drops_the_rest() -> None:
    reply = parse_tool_calls("Both:\n" + TWO + "\nok", max_calls=1)
    assert [c.name for c in reply.calls] == ["get_weather"] and reply.content == "Both:\n\n\nok"


def test_text_around_the_calls_is_the_content() -> None:
    reply = parse_tool_calls("Let me check.\n" + ONE + "\nBack soon.")
    assert reply.content == "Let me check.\n\nBack soon."
    assert len(reply.calls) == 1


def test_plain_text_is_content() -> None:
    assert parse_tool_calls("  Hello.\n").content == "Hello."
    assert parse_tool_calls("").content is None


def test_a_call_left_open_at_the_end_is_read() -> None:
    reply = parse_tool_calls('Sure <tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}')
    assert reply.content == "Sure" and reply.calls[0].name == "get_time"


def test_arguments_written_as_a_json_string_are_an_object() -> None:
    reply = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert json.loads(reply.calls[0].arguments) == {"a": 1}


def test_missing_arguments_are_empty() -> None:
    assert parse_call_body('{"name": "f"}') == ParsedCall("f", "{}")


@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_call_leaves_the_reply_as_content(text: str) -> None:
    reply = parse_tool_calls(text)
    assert reply.content == text and reply.calls == ()


def test_a_call_cut_inside_its_arguments_is_the_call_so_far_as_the_stream_sends_it() -> None:
    """As OpenAI answers a call cut by the token limit: its name, the argument text written so far."""
    reply = parse_tool_calls(CUT)
    assert reply.content == "Hi" and reply.calls == (ParsedCall("get_time", '{"zone": "U'),)
    assert parse_tool_calls(CUT.replace('"get_time"', '""')).content == CUT.replace('"get_time"', '""')
    closed = CUT + "</tool_call>"  # a closed block that does not parse is still text
    assert parse_tool_calls(closed).content == closed


def test_one_malformed_call_spoils_the_others() -> None:
    text = ONE + MALFORMED["not_json"]
    assert parse_tool_calls(text).content == text


def test_deep_nesting_is_content_not_a_crash() -> None:
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    assert parse_tool_calls(text).calls == ()


def test_call_ids() -> None:
    first, second = new_call_id(), new_call_id()
    assert first.startswith("call_") and len(first) == 29 and first != second
