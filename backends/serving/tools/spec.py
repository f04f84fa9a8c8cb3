"""``ToolRequest``: a chat request's ``tools``, ``tool_choice`` and ``parallel_tool_calls``, checked.

Bad input is a 400 naming the field, as OpenAI answers: a tool that is not a function, has no name, a
duplicate name, or ``parameters`` that are no JSON Schema object (or use what the grammar compiler
cannot follow) -> ``tools``; an unknown choice, a named function missing from ``tools``, or a choice
with no tools -> ``tool_choice``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from backends.serving.errors import InvalidRequest
from backends.serving.protocol import ChatCompletionRequest

ChoiceMode = Literal["none", "auto", "required", "named"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
"""OpenAI's function names (letters, digits, ``_`` and ``-``, up to 64), plus ``.`` (MCP servers use it)."""
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
"""A function declared without ``parameters`` takes none (OpenAI's reading)."""


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    """One function the model may call."""

    name: str
    parameters: dict[str, Any]
    """A JSON Schema of type object: what the call's arguments must match."""
    description: str | None = None
    strict: bool = False
    """OpenAI's ``strict``: a forced call follows the schema anyway; ``auto`` calls are not constrained."""

    def as_openai(self) -> dict[str, Any]:
        """The tool as OpenAI's wire shape, which templates (and the Hermes fallback) print."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True, slots=True, eq=False)
class ToolRequest:
    """The tools a chat request offers and how the model must use them."""

    tools: tuple[Tool, ...]
    mode: ChoiceMode
    """``none``: no call; ``auto``: the model chooses; ``required``: at least one; ``named``: that one."""
    forced_name: str | None = None
    """The function ``named`` forces."""
    is_parallel: bool = True
    """False (``parallel_tool_calls: false``): at most one call a reply."""

    @property
    def is_forced(self) -> bool:
        """The reply must be calls (``required`` or ``named``): a grammar constrains it."""
        return self.mode in ("required", "named")

    @property
    def parses_calls(self) -> bool:
        """The reply is searched for calls (every mode but ``none``)."""
        return self.mode != "none"

    def callable_tools(self) -> tuple[Tool, ...]:
        """The tools a call may name: the forced one when ``named``, else all."""
        if self.mode == "named":
            return tuple(t for t in self.tools if t.name == self.forced_name)
        return self.tools


def tool_request(body: ChatCompletionRequest) -> ToolRequest | None:
    """The request's tools, checked; None when it offers none (and asks for no call)."""
    if body.tools is None or body.tools == []:
        if body.tool_choice not in (None, "none"):
            raise InvalidRequest(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                param="tool_choice",
            )
        return None
    if not isinstance(body.tools, list):
        raise InvalidRequest("'tools' must be a list of function tools.", param="tools")
    tools = tuple(_tool(i, item) for i, item in enumerate(body.tools))
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidRequest(f"Tool names must be unique; repeated: {', '.join(duplicates)}.", param="tools")
    mode, forced_name = _choice(body.tool_choice, set(names))
    return ToolRequest(
        tools=tools, mode=mode, forced_name=forced_name, is_parallel=body.parallel_tool_calls is not False
    )


def parses_tool_calls(body: ChatCompletionRequest) -> bool:
    """Whether replies to this (already checked) request are searched for calls."""
    return isinstance(body.tools, list) and bool(body.tools) and body.tool_choice != "none"


def _tool(index: int, item: Any) -> Tool:
    where = f"tools[{index}]"
    if not isinstance(item, dict) or item.get("type", "function") != "function":
        raise InvalidRequest(f"{where}: only tools of type 'function' are supported.", param="tools")
    function = item.get("function")
    if not isinstance(function, dict):
        raise InvalidRequest(f"{where}: missing 'function' object.", param="tools")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.function: missing required parameter 'name'.", param="tools")
    if NAME_PATTERN.fullmatch(name) is None:
        raise InvalidRequest(
            f"{where}.function.name {name!r} must be 1-64 letters, digits, '_', '-' or '.'.", param="tools"
        )
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(f"{where}.function.description must be a string.", param="tools")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = EMPTY_PARAMETERS
    problem = _schema_problem(parameters)
    if problem is not None:
        raise InvalidRequest(f"{where}.function.parameters ({name}): {problem}", param="tools")
    return Tool(
        name=name, parameters=parameters, description=description, strict=function.get("strict") is True
    )


def _schema_problem(parameters: Any) -> str | None:
    """Why ``parameters`` is no usable JSON Schema object, or None."""
    if not isinstance(parameters, dict):
        return "must be a JSON Schema object."
    if parameters.get("type", "object") != "object":
        return "the schema's type must be 'object' (a function takes named arguments)."
    return _compile_problem(json.dumps(parameters, sort_keys=True))


@lru_cache(maxsize=256)
def _compile_problem(schema_json: str) -> str | None:
    # xgrammar is what forces calls: a schema it cannot compile would fail there, so fail here instead.
    # Imported lazily: it loads torch, which the serving front needs only once an engine runs.
    import xgrammar

    try:
        xgrammar.Grammar.from_json_schema(schema_json)
    except (RuntimeError, ValueError, TypeError) as exc:
        # xgrammar's message starts "[time] file.cc:line: "; the rest is the reason
        reason = _SOURCE_PREFIX.sub("", str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
        return f"not a usable JSON Schema: {reason[:200]}"
    return None


def _choice(tool_choice: Any, names: set[str]) -> tuple[ChoiceMode, str | None]:
    if tool_choice is None or tool_choice == "auto":
        return "auto", None
    if tool_choice in ("none", "required"):
        return tool_choice, None
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise InvalidRequest("tool_choice.function.name is required.", param="tool_choice")
        if name not in names:
            raise InvalidRequest(
                f"Invalid value for 'tool_choice': function {name!r} is not among the tools.",
                param="tool_choice",
            )
        return "named", name
    raise InvalidRequest(
        "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
        '{"type": "function", "function": {"name": ...}}.',
        param="tool_choice",
    )
