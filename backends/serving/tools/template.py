"""Tools and the call history into the prompt: the model's own template, or the Hermes fallback.

A chat template that reads ``tools`` (Qwen 2.5/3, Llama 3.1, Hermes 2 Pro) gets them as the ``tools``
variable, and the history as transformers passes it: assistant messages with ``tool_calls`` (arguments
as objects) and ``tool`` messages with ``tool_call_id``. Any other template (SmolLM2's ChatML, Gemma's)
gets the Hermes form written into plain messages, as Qwen 2.5's template writes it:

- the system prompt gains a ``# Tools`` section listing each function's JSON inside ``<tools></tools>``
  and asking for calls as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
- an assistant message's calls become ``<tool_call>`` blocks after its text;
- tool results become a user turn of ``<tool_response>`` blocks (consecutive results share one turn),
  which keeps user/assistant alternation for templates that insist on it.

With ``tool_choice: "none"`` the tools are left out of the prompt (the model must not call them); the
history is still rendered. A request with no tools and no calls in its history is left as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from backends.engine.chat_template import template_variables
from backends.serving.tools.markup import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, call_block, response_block
from backends.serving.tools.spec import ToolRequest

HERMES_SYSTEM = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    f"{TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} XML tags:\n"
    f'{TOOL_CALL_OPEN}\n{{{{"name": <function-name>, "arguments": <args-json-object>}}}}\n{TOOL_CALL_CLOSE}'
)
"""The fallback's system section (Qwen 2.5's wording); ``{tools}`` is one function's JSON a line."""
ONE_CALL = "\n\nCall at most one function in a reply."


@dataclass(frozen=True, slots=True)
class ToolPrompt:
    """What the chat template is given: the messages and extra context (``tools``)."""

    messages: list[dict[str, Any]]
    context: dict[str, Any] = field(default_factory=dict)


def has_native_tools(tokenizer: Any) -> bool:
    """The tokenizer's chat template renders tools itself (it reads a ``tools`` variable)."""
    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and "tools" in template_variables(template)


def tool_prompt(messages: list[dict[str, Any]], tools: ToolRequest | None, *, is_native: bool) -> ToolPrompt:
    """The messages (rendered by ``prompt.render_messages``) and context for a template."""
    offered = tools is not None and tools.mode != "none"
    if is_native:
        context = {"tools": [t.as_openai() for t in tools.tools]} if tools is not None and offered else {}
        return ToolPrompt(messages, context)
    if tools is None and not any(m.get("tool_calls") for m in messages):
        return ToolPrompt(messages)  # no tools in sight: the template takes the messages as they are
    hermes = _hermes_history(messages)
    if tools is not None and offered:
        hermes = _with_system_section(hermes, _system_section(tools))
    return ToolPrompt(hermes)


def _system_section(tools: ToolRequest) -> str:
    listing = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools.tools)
    return HERMES_SYSTEM.format(tools=listing) + ("" if tools.is_parallel else ONE_CALL)


def _with_system_section(messages: list[dict[str, Any]], section: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        text = f"{first['content']}\n\n{section}" if first["content"] else section
        return [{**first, "content": text}, *messages[1:]]
    return [{"role": "system", "content": section}, *messages]


def _hermes_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    is_in_results = False
    for message in messages:
        role = message["role"]
        if role == "tool":
            block = response_block(message["content"])
            if is_in_results:  # consecutive results share one user turn
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            is_in_results = True
            continue
        is_in_results = False
        if role == "assistant" and message.get("tool_calls"):
            blocks = [
                call_block(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
            ]
            text = "\n".join([message["content"], *blocks] if message["content"] else blocks)
            out.append({"role": "assistant", "content": text})
        else:
            out.append({"role": role, "content": message["content"]})
    return out
