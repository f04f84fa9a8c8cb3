"""A streamed reply read for calls: the deltas reassemble into what the parser reads from the whole text,
however the text is split; nothing of the markup leaks into the content."""

from __future__ import annotations

import json
from typing import Any

import pytest
from msgspec import UNSET

from backends.serving.protocol import ChatDelta
from backends.serving.tools.parser import parse_tool_calls
from backends.serving.tools.stream import ToolCallStream, held_prefix_length
from tests.backends.serving.tools.samples import CUT, MALFORMED, ONE, REPLIES

ARGS = {"city": "Paris", "days": 3}


def accumulate(deltas: list[ChatDelta]) -> tuple[str | None, list[dict[str, Any]]]:
    """Content and calls, as a client (the openai SDK) puts deltas together; checks the delta shapes."""
    content = ""
    calls: list[dict[str, Any]] = []
    for delta in deltas:
        if delta.content is not UNSET:
            assert delta.content  # no empty content deltas
            content += delta.content
        if delta.tool_calls is not UNSET:
            for piece in delta.tool_calls:
                if piece.index == len(calls):  # the first delta of a call
                    assert piece.id is not UNSET and piece.id.startswith("call_")
                    assert piece.type == "function" and piece.function.name
                    calls.append({"name": piece.function.name, "arguments": piece.function.arguments or ""})
                else:
                    assert (
                        piece.index == len(calls) - 1 and piece.id is UNSET and piece.function.name is UNSET
                    )
                    calls[-1]["arguments"] += piece.function.arguments
    return content or None, calls


def run(pieces: list[str], max_calls: int | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    reader = ToolCallStream(max_calls)
    deltas = [d for piece in pieces for d in reader.feed(piece)]
    deltas += reader.finish()
    content, calls = accumulate(deltas)
    assert reader.num_calls == len(calls)
    return content, calls


def expected(text: str, max_calls: int | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    reply = parse_tool_calls(text, max_calls)
    return reply.content, [{"name": c.name, "arguments": json.loads(c.arguments)} for c in reply.calls]


def parsed(result: tuple[str | None, list[dict[str, Any]]]) -> tuple[str | None, list[dict[str, Any]]]:
    content, calls = result
    return content, [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls]


@pytest.mark.parametrize("text", REPLIES.values(), ids=REPLIES.keys())
def test_every_split_gives_the_plain_answer(text: str) -> None:
    want = expected(text)
    assert parsed(run([text])) == want
    assert parsed(run(list(text))) == want  # a character at a time
    for cut in range(1, len(text)):
        assert parsed(run([text[:cut], text[cut:]])) == want, cut


@pytest.mark.parametrize("text", REPLIES.values(), ids=REPLIES.keys())
def test_every_byte_boundary_of_the_utf8_text(text: str) -> None:
    # the engine's text ends in U+FFFD until a character's last byte arrives; the stream sends whole
    # characters only (DeltaCursor), so the reader sees every prefix that ends on a character
    data = text.encode()
    pieces, sent = [], 0
    for end in range(1, len(data) + 1):
        try:
            prefix = data[:end].decode()
        except UnicodeDecodeError:
            continue
        pieces.append(prefix[sent:])
        sent = len(prefix)
    assert parsed(run(pieces)) == expected(text)


CLOSED = {name: text for name, text in REPLIES.items() if name != "unclosed"}
"""Replies that stay well formed with a call after them (an unclosed block would swallow it)."""


@pytest.mark.parametrize("text", CLOSED.values(), ids=CLOSED.keys())
def test_one_call_only_drops_the_rest_as_the_parser_does(text: str) -> None:
    text = text + "\n" + ONE  # at least one call, two wherever there was one
    want = expected(text, max_calls=1)
    assert len(want[1]) == 1
    for cut in range(1, len(text)):
        assert parsed(run([text[:cut], text[cut:]], max_calls=1)) == want, cut
    assert parsed(run(list(text), max_calls=1)) == want


def test_the_first_delta_announces_the_call_before_its_arguments_end() -> None:
    reader = ToolCallStream()
    assert reader.feed('<tool_call>\n{"name": "get_time", "arguments": ') == []  # an object or a string?
    first, piece = reader.feed('{"zone": "UT')
    assert first.tool_calls is not UNSET
    assert first.tool_calls[0].function.name == "get_time" and first.tool_calls[0].function.arguments == ""
    assert piece.tool_calls is not UNSET and piece.tool_calls[0].function.arguments == '{"zone": "UT'


def test_markup_never_reaches_the_content() -> None:
    content, calls = run(list("Checking.\n" + ONE + "\nDone."))
    assert content == "Checking.\n\nDone." and len(calls) == 1
    assert "<" not in content


@pytest.mark.parametrize("name", ["not_json", "no_name", "array_arguments"])
def test_a_malformed_closed_call_is_sent_as_content(name: str) -> None:
    text = MALFORMED[name]
    assert run(list(text)) == (text, [])


def test_a_cut_off_call_in_the_usual_form_streams_what_came() -> None:
    content, calls = run([CUT])
    assert content == "Hi" and calls == [{"name": "get_time", "arguments": '{"zone": "U'}]


@pytest.mark.parametrize("cut", range(1, len("}\n</tool_call>")))
def test_a_reply_cut_inside_the_close_tag_streams_the_whole_call_as_the_plain_answer_has_it(cut: int) -> None:
    """A forced call cut by max_tokens after its arguments: nothing of the tag reaches the arguments."""
    text = ONE[:-cut]
    assert parsed(run(list(text))) == expected(text) == (None, [{"name": "get_weather", "arguments": ARGS}])


def test_held_prefix_length() -> None:
    assert held_prefix_length("abc <tool", "<tool_call>") == 5
    assert held_prefix_length("abc", "<tool_call>") == 0
    assert held_prefix_length("<tool_call>", "<tool_call>") == 0  # whole: not a proper start
