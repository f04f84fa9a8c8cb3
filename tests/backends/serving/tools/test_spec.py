"""``tools``/``tool_choice`` checked into a ``ToolRequest``; bad ones are 400s naming the field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from backends.serving.errors import InvalidRequest
from backends.serving.protocol import ChatCompletionRequest
from backends.serving.tools.spec import EMPTY_PARAMETERS, parses_tool_calls, tool_request
from tests.backends.serving.tools.samples import TOOLS

NAMED = {"type": "function", "function": {"name": "get_time"}}


def body(**fields: Any) -> ChatCompletionRequest:
    return msgspec.convert({"messages": [{"role": "user", "content": "hi"}], **fields}, ChatCompletionRequest)


def test_no_tools_is_no_tool_request() -> None:
    assert tool_request(body()) is None
    assert tool_request(body(tools=[], tool_choice="none")) is None


def test_auto_is_the_default_with_tools() -> None:
    tools = tool_request(body(tools=TOOLS))
    assert tools is not None and tools.mode == "auto" and tools.is_parallel and not tools.is_forced
    assert [t.name for t in tools.tools] == ["get_weather", "get_time"]
    assert tools.tools[0].description == "The forecast" and tools.tools[1].description is None


@pytest.mark.parametrize(
    ("choice", "mode", "forced"),
    [
        ("none", "none", None),
        ("auto", "auto", None),
        ("required", "required", None),
        (NAMED, "named", "get_time"),
    ],
)
def test_the_choices(choice: Any, mode: str, forced: str | None) -> None:
    tools = tool_request(body(tools=TOOLS, tool_choice=choice, parallel_tool_calls=False))
    assert tools is not None and (tools.mode, tools.forced_name, tools.is_parallel) == (mode, forced, False)
    assert tools.is_forced == (mode in ("required", "named")) and tools.parses_calls == (mode != "none")
    assert [t.name for t in tools.callable_tools()] == (
        ["get_time"] if forced else ["get_weather", "get_time"]
    )
    assert parses_tool_calls(body(tools=TOOLS, tool_choice=choice)) == (mode != "none")


def test_a_tool_without_parameters_takes_none() -> None:
    tools = tool_request(body(tools=[{"type": "function", "function": {"name": "ping"}}]))
    assert tools is not None and tools.tools[0].parameters == EMPTY_PARAMETERS
    assert tools.tools[0].as_openai() == {
        "type": "function",
        "function": {"name": "ping", "parameters": EMPTY_PARAMETERS},
    }


def fn(**function: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": function}]


@pytest.mark.parametrize(
    "tools",
    [
        "get_weather",
        ["get_weather"],
        [{"type": "code_interpreter"}],
        [{"type": "function"}],
        fn(description="no name"),
        fn(name=""),
        fn(name="has space"),
        fn(name="x" * 65),
        fn(name="f", description=3),
        fn(name="f", parameters="{}"),
        fn(name="f", parameters={"type": "string"}),
        fn(name="f", parameters={"type": "object", "properties": {"a": {"type": "nonsense"}}}),
        fn(name="f", parameters={"type": "object", "properties": {"a": {"$ref": "#/missing"}}}),
        [*fn(name="f"), *fn(name="f")],
    ],
    ids=lambda v: str(v)[:50],
)
def test_bad_tools_are_400s_naming_tools(tools: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        tool_request(body(tools=tools))
    assert info.value.param == "tools" and info.value.status_code == 400


def test_an_uncompilable_schema_says_why() -> None:
    with pytest.raises(InvalidRequest, match=r"parameters \(f\): not a usable JSON Schema: .*nonsense"):
        tool_request(
            body(tools=fn(name="f", parameters={"type": "object", "properties": {"a": {"type": "nonsense"}}}))
        )


@pytest.mark.parametrize(
    ("tools", "choice"),
    [
        (TOOLS, "sometimes"),
        (TOOLS, {"type": "function", "function": {"name": "get_date"}}),
        (TOOLS, {"type": "function"}),
        (TOOLS, {"type": "allowed_tools"}),
        (None, "auto"),
        (None, "required"),
        ([], NAMED),
    ],
    ids=lambda v: str(v)[:40],
)
def test_bad_choices_are_400s_naming_tool_choice(tools: Any, choice: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        tool_request(body(tools=tools, tool_choice=choice))
    assert info.value.param == "tool_choice"
