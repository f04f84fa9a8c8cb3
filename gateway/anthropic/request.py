"""A Messages request as the chat completions request it means.

==========================  ==========================================================================
Messages                    chat completions
==========================  ==========================================================================
``system`` (text or blocks) the first message, ``system``
``text`` block              a text part (a user turn) or the text (an assistant turn)
``image`` block             an ``image_url`` part (base64 as a ``data:`` URL, or the URL)
``tool_use`` block          the assistant turn's ``tool_calls`` (``input`` as JSON ``arguments``)
``tool_result`` block       a ``tool`` message (``tool_use_id`` -> ``tool_call_id``), before the turn's text
``tools``                   function tools (``input_schema`` -> ``parameters``)
``tool_choice``             ``auto`` -> ``auto``, ``any`` -> ``required``, ``tool`` -> the function,
                            ``none`` -> ``none``; ``disable_parallel_tool_use`` -> ``parallel_tool_calls``
``stop_sequences``          ``stop``
``output_config.format``    ``response_format`` (a strict JSON schema)
``metadata.user_id``        ``user``
``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``stream``: the same names
==========================  ==========================================================================

The body is validated against ``schema.py``'s Structs first (a 400 naming the field). A stream asks for
the usage chunk (Anthropic's last events carry the usage). What no chat completions
server can honour is refused with a 400 naming it: extended ``thinking``, server tools (web search,
code execution, computer use), ``mcp_servers``, ``container``, ``output_config.effort``,
``diagnostics``, ``inference_geo``, documents and other block types.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.anthropic.params import MessagesParams
from gateway.anthropic.schema import (
    Base64Source,
    ChooseAny,
    ChooseAuto,
    ChooseNone,
    ChooseTool,
    CountTokensRequest,
    ImageBlock,
    JsonOutputFormat,
    Message,
    MessagesRequest,
    PlainText,
    TextBlock,
    Tool,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    convert_request,
    parse_json,
)
from gateway.errors import InvalidRequest

__all__ = ["REFUSED_FIELDS", "to_chat", "translate"]

REFUSED_FIELDS = {
    "mcp_servers": "MCP servers are not run by this gateway.",
    "container": "code execution containers are not run by this gateway.",
    "context_management": "context management is not supported.",
    "diagnostics": "prompt-cache diagnostics are not reported by this gateway.",
    "inference_geo": "choosing the inference region per request is not supported.",
}


def _refuse(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {message}", param=param)


def to_chat(raw: bytes, *, is_count: bool = False) -> dict[str, Any]:
    """The chat completions body of a Messages request body; ``InvalidRequest`` naming what is wrong.
    ``is_count``: a ``count_tokens`` body, which has no ``max_tokens``."""
    return translate(raw, is_count=is_count)[0]


def translate(raw: bytes, *, is_count: bool = False) -> tuple[dict[str, Any], MessagesParams]:
    """``to_chat``, and the Messages fields the chat request's came from (for an upstream's errors)."""
    document = parse_json(raw)
    _refuse_unservable(document)
    request: MessagesRequest | CountTokensRequest = (
        convert_request(document, CountTokensRequest)
        if is_count
        else convert_request(document, MessagesRequest)
    )
    sources: list[str] = []
    chat: dict[str, Any] = {
        "model": request.model,
        "messages": _messages(request.system, request.messages, sources),
    }
    if request.tools:
        chat["tools"] = [_tool(i, tool) for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        _tool_choice(request.tool_choice, chat)
    output = request.output_config
    output_format = (output.format if output is not None else None) or request.output_format
    if output_format is not None:
        chat["response_format"] = _response_format(output_format)
    if isinstance(request, MessagesRequest):
        _generation(request, chat)
    is_legacy_output = output_format is not None and (output is None or output.format is None)
    return chat, MessagesParams(sources, "output_format" if is_legacy_output else "output_config.format")


def _refuse_unservable(document: Any) -> None:
    """What fits Anthropic's API but no chat completions server can do, refused by name before the body
    is validated (so the message says why, not only that the field is unknown)."""
    if not isinstance(document, dict):
        return  # validation says what is wrong
    for field, why in REFUSED_FIELDS.items():
        if document.get(field) is not None:
            raise _refuse(field, why)
    thinking = document.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        raise _refuse("thinking", "extended thinking is not supported by this model.")
    output = document.get("output_config")
    if isinstance(output, dict) and output.get("effort") is not None:
        raise _refuse("output_config.effort", "this model has no effort setting (it does not reason).")
    tools = document.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(tool, dict) and tool.get("type") not in (None, "custom"):
            raise _refuse(f"tools.{i}.type", f"server tools ({tool['type']}) are not run by this gateway.")


def _generation(request: MessagesRequest, chat: dict[str, Any]) -> None:
    chat["max_tokens"] = request.max_tokens
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(request, name)
        if value is not None:
            chat[name] = value
    if request.stop_sequences:
        chat["stop"] = request.stop_sequences
    if request.metadata is not None and request.metadata.user_id is not None:
        chat["user"] = request.metadata.user_id
    if request.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}


def _messages(
    system: str | list[PlainText] | None, given: list[Message], sources: list[str]
) -> list[dict[str, Any]]:
    """The chat messages; ``sources`` gets the Messages field each came from."""
    messages: list[dict[str, Any]] = []
    text = system if isinstance(system, str) else "\n\n".join(b.text for b in system or [])
    if text:
        messages.append({"role": "system", "content": text})
        sources.append("system")
    for i, message in enumerate(given):
        content = message.content
        blocks = [TextBlock(text=content)] if isinstance(content, str) else content
        where = f"messages.{i}.content"
        if isinstance(message, UserMessage):
            messages += _user_turn(blocks, where, sources)
        else:
            messages.append(_assistant_turn(blocks, where))
            sources.append(f"messages.{i}")
    return messages


def _user_turn(blocks: list[Any], where: str, sources: list[str]) -> list[dict[str, Any]]:
    """Tool results first (a chat server expects them right after the assistant's calls), then the rest."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            source = block.source
            if isinstance(source, Base64Source):
                url = f"data:{source.media_type};base64,{source.data}"
            else:
                url = source.url
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(block, ToolResultBlock):
            results.append(_tool_result(block))
            sources.append(f"{where}.{j}")
        else:
            kind = block.__struct_config__.tag
            raise _refuse(f"{where}.{j}.type", f"a {kind} block cannot be in a user turn.")
    if parts:
        is_plain = all(part["type"] == "text" for part in parts)
        content: Any = "\n\n".join(p["text"] for p in parts) if is_plain else parts
        results.append({"role": "user", "content": content})
        sources.append(where)
    return results


def _tool_result(block: ToolResultBlock) -> dict[str, Any]:
    content = block.content
    text = content if isinstance(content, str) else "\n\n".join(part.text for part in content)
    if block.is_error:
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}


def _assistant_turn(blocks: list[Any], where: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            function = {"name": block.name, "arguments": msgspec.json.encode(block.input).decode()}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif isinstance(block, ImageBlock | ToolResultBlock):
            kind = block.__struct_config__.tag
            raise _refuse(f"{where}.{j}.type", f"a {kind} block cannot be in an assistant turn.")
        # thinking blocks: a reasoning model's earlier thoughts, nothing a chat turn can carry
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool(index: int, tool: Tool) -> dict[str, Any]:
    """A function tool; its ``input_schema`` must be of type object, as every chat server wants its
    ``parameters`` (what the schema's type cannot say: ``schema.ObjectSchema``)."""
    if tool.input_schema.get("type", "object") != "object":
        param = f"tools.{index}.input_schema.type"
        raise _refuse(param, "Input should be 'object' (a tool takes named arguments).")
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _response_format(output_format: JsonOutputFormat) -> dict[str, Any]:
    """``{type: json_schema, schema}`` (structured outputs) as chat's strict ``response_format``."""
    schema = {"name": "output", "schema": output_format.schema, "strict": True}
    return {"type": "json_schema", "json_schema": schema}


def _tool_choice(choice: ToolChoice, chat: dict[str, Any]) -> None:
    if isinstance(choice, ChooseAuto):
        chat["tool_choice"] = "auto"
    elif isinstance(choice, ChooseAny):
        chat["tool_choice"] = "required"
    elif isinstance(choice, ChooseNone):
        chat["tool_choice"] = "none"
    elif isinstance(choice, ChooseTool):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    if choice.disable_parallel_tool_use and "tools" in chat:
        chat["parallel_tool_calls"] = False
