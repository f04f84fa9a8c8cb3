"""Tools and the call history in the prompt: the model's own template when it reads ``tools``, else the
Hermes fallback written into plain messages."""

from __future__ import annotations

import json
from typing import Any

from backends.engine.chat_template import GEMMA3_CHAT_TEMPLATE, render_chat_template, template_variables
from backends.serving.prompt import render_messages
from backends.serving.protocol import ChatMessage, FunctionCall, MessageToolCall
from backends.serving.tools.spec import Tool, ToolRequest
from backends.serving.tools.template import has_native_tools, tool_prompt
from tests.backends.engine.tiny import CHATML
from tests.backends.serving.tools.samples import TIME, WEATHER

TOOLS = ToolRequest(tools=(Tool("get_weather", WEATHER, "The forecast"), Tool("get_time", TIME)), mode="auto")
NATIVE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% for c in m.tool_calls or [] %}(call {{ c.function.name }} {{ c.function.arguments | tojson }})"
    "{% endfor %}"
    "{% endfor %}"
)
"""A template that renders tools itself, as Qwen's and Llama 3.1's do."""


class Tokenizer:
    def __init__(self, chat_template: str) -> None:
        self.chat_template = chat_template


def history() -> list[dict[str, Any]]:
    call = MessageToolCall(FunctionCall("get_time", '{"zone": "UTC"}'), id="call_1")
    other = MessageToolCall(FunctionCall("get_weather", {"city": "Rome", "days": 1}), id="call_2")
    return render_messages(
        [
            ChatMessage("system", "Be brief."),
            ChatMessage("user", "Time and weather?"),
            ChatMessage("assistant", None, tool_calls=[call, other]),
            ChatMessage("tool", "12:00", tool_call_id="call_1"),
            ChatMessage("tool", "sunny", tool_call_id="call_2"),
        ]
    )


def test_the_template_variables_tell_which_templates_render_tools() -> None:
    assert "tools" in template_variables(NATIVE)
    assert "tools" not in template_variables(CHATML)
    assert has_native_tools(Tokenizer(NATIVE)) and not has_native_tools(Tokenizer(CHATML))
    assert not has_native_tools(object())  # no template at all: the fallback
    assert template_variables("{% if %}") == frozenset()  # unparsable: the fallback, and its own error later


def test_history_is_rendered_as_transformers_passes_it() -> None:
    messages = history()
    assert messages[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_time", "arguments": {"zone": "UTC"}},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 1}},
            },
        ],
    }
    assert messages[3] == {"role": "tool", "content": "12:00", "tool_call_id": "call_1"}


def test_a_native_template_gets_the_tools_and_the_history_as_is() -> None:
    prompt = tool_prompt(history(), TOOLS, is_native=True)
    text = render_chat_template(NATIVE, prompt.messages, **prompt.context)
    assert text.startswith("<tools>get_weather;get_time;</tools>[system]Be brief.")
    assert '(call get_time {"zone": "UTC"})' in text and "[tool]12:00[tool]sunny" in text


def test_the_hermes_fallback_lists_the_tools_in_the_system_prompt() -> None:
    prompt = tool_prompt(history()[:2], TOOLS, is_native=False)
    assert prompt.context == {}
    system = prompt.messages[0]["content"]
    assert system.startswith("Be brief.\n\n# Tools\n")
    listing = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line)["function"]["name"] for line in listing] == ["get_weather", "get_time"]
    assert json.loads(listing[0])["function"]["parameters"] == WEATHER
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in system
    assert "at most one" not in system


def test_the_fallback_adds_a_system_message_when_there_is_none() -> None:
    messages = history()[1:2]
    prompt = tool_prompt(
        messages, ToolRequest(tools=TOOLS.tools, mode="required", is_parallel=False), is_native=False
    )
    assert prompt.messages[0]["role"] == "system" and prompt.messages[0]["content"].startswith("# Tools")
    assert prompt.messages[0]["content"].endswith("Call at most one function in a reply.")
    assert prompt.messages[1:] == messages


def test_the_fallback_writes_calls_as_blocks_and_results_as_one_user_turn() -> None:
    prompt = tool_prompt(history(), TOOLS, is_native=False)
    assistant, results = prompt.messages[2], prompt.messages[3]
    assert assistant == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}\n</tool_call>',
    }
    assert results == {
        "role": "user",
        "content": "<tool_response>\n12:00\n</tool_response>\n<tool_response>\nsunny\n</tool_response>",
    }
    assert len(prompt.messages) == 4


def test_the_fallback_keeps_gemmas_strict_alternation() -> None:
    prompt = tool_prompt(history(), TOOLS, is_native=False)
    text = render_chat_template(GEMMA3_CHAT_TEMPLATE, prompt.messages, bos_token="<bos>")
    assert text.count("<start_of_turn>user") == 2 and text.count("<start_of_turn>model") == 2
    assert text.startswith("<bos><start_of_turn>user\nBe brief.\n\n# Tools")


def test_choice_none_leaves_the_tools_out_but_renders_the_history() -> None:
    none = ToolRequest(tools=TOOLS.tools, mode="none")
    fallback = tool_prompt(history(), none, is_native=False)
    assert fallback.messages[0]["content"] == "Be brief." and "<tool_call>" in fallback.messages[2]["content"]
    assert tool_prompt(history(), none, is_native=True).context == {}


def test_without_tools_or_calls_the_messages_pass_unchanged() -> None:
    messages = [*history()[:2], {"role": "tool", "content": "42", "tool_call_id": None}]
    assert tool_prompt(messages, None, is_native=False).messages == messages
