"""The constraint of a forced call, compiled by xgrammar: it accepts exactly the calls it should."""

from __future__ import annotations

from typing import Any

import pytest

from backends.serving.tools.grammar import forced_calls
from backends.serving.tools.markup import call_block
from backends.serving.tools.spec import Tool, ToolRequest
from tests.backends.serving.tools.samples import TIME, WEATHER

xgrammar = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string as accepts  # noqa: E402

TOOLS = (Tool("get_weather", WEATHER), Tool("get_time", TIME))
WEATHER_CALL = call_block("get_weather", {"city": "Paris", "days": 3})
TIME_CALL = call_block("get_time", {"zone": "UTC"})


def grammar(mode: str, *, name: str | None = None, is_parallel: bool = True) -> Any:
    constraint = forced_calls(ToolRequest(tools=TOOLS, mode=mode, forced_name=name, is_parallel=is_parallel))  # type: ignore[arg-type]
    assert constraint is not None and constraint.structural_tag is not None
    return xgrammar.Grammar.from_structural_tag(constraint.structural_tag)


def test_auto_and_none_are_not_constrained() -> None:
    assert forced_calls(ToolRequest(tools=TOOLS, mode="auto")) is None
    assert forced_calls(ToolRequest(tools=TOOLS, mode="none")) is None


def test_required_takes_any_tool_one_or_more_times() -> None:
    g = grammar("required")
    assert accepts(g, WEATHER_CALL) and accepts(g, TIME_CALL)
    assert accepts(g, WEATHER_CALL + "\n" + TIME_CALL)
    assert accepts(g, '<tool_call>\n{"name": "get_time", "arguments": {\n  "zone": "CET"\n}}\n</tool_call>')


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Sure. " + TIME_CALL,
        TIME_CALL + " done",
        call_block("get_weather", {"city": "Berlin", "days": 3}),
        call_block("get_weather", {"city": "Paris"}),
        call_block("get_weather", {"city": "Paris", "days": 3, "extra": 1}),
        call_block("get_date", {}),
    ],
    ids=["empty", "text_before", "text_after", "enum", "required_key", "extra_key", "unknown_tool"],
)
def test_required_refuses_anything_but_valid_calls(text: str) -> None:
    assert not accepts(grammar("required"), text)


def test_one_call_only_without_parallel_calls() -> None:
    g = grammar("required", is_parallel=False)
    assert accepts(g, TIME_CALL) and not accepts(g, TIME_CALL + "\n" + TIME_CALL)


def test_named_takes_only_that_function() -> None:
    g = grammar("named", name="get_time")
    assert accepts(g, TIME_CALL) and not accepts(g, WEATHER_CALL)


def test_a_named_choice_is_exactly_one_call_even_when_parallel() -> None:
    from backends.serving.tools.grammar import forced_calls_format

    tools = (Tool("get_weather", {"type": "object"}), Tool("get_time", {"type": "object"}))
    named = forced_calls_format(ToolRequest(tools=tools, mode="named", forced_name="get_weather"))
    required = forced_calls_format(ToolRequest(tools=tools, mode="required"))
    assert named["stop_after_first"] is True and len(named["tags"]) == 1
    assert required["stop_after_first"] is False and len(required["tags"]) == 2
