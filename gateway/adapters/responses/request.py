"""A Responses API request as a chat completions request: ``chat_request(body)``.

``instructions`` becomes the system message; ``input`` (a string, or items: ``message`` items with a
string or ``input_text`` / ``output_text`` / ``input_image`` parts, ``function_call`` items,
``function_call_output`` items) becomes the messages, a model's function calls an assistant
message's ``tool_calls`` and their outputs ``tool`` messages. Function ``tools``, ``tool_choice``,
``max_output_tokens`` (``max_tokens``), ``temperature``, ``top_p`` and ``text.format``
(``response_format``) map one to one; a stream asks for its usage. What a chat server cannot honour
(built-in tools, ``reasoning``, ``background``, ``include``, ``conversation``, stored prompts) is a
400 naming the field. Fields of neither API pass through (``seed``, ``top_k``, vendor extras), like
every other request the gateway forwards.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest

__all__ = ["chat_request"]

_DROPPED = frozenset(
    {
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "text",
        "stream_options",
        "store",
        "previous_response_id",
        "metadata",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "truncation",
        "max_tool_calls",
    }
)
"""Responses fields that are mapped here, or never change a chat server's output (``store`` and
``previous_response_id`` are the gateway's: ``gateway.responses``)."""

_REFUSED = {
    "background": "Background responses are not served for this model; send the request without it.",
    "conversation": "Conversations are not served; continue with `previous_response_id` instead.",
    "prompt": "Stored prompt templates are not served; send `instructions` and `input` instead.",
    "reasoning": "This model has no reasoning options; send the request without `reasoning`.",
    "include": "This model cannot include extra output data; send the request without `include`.",
    "top_logprobs": "This model's responses carry no log probabilities; leave `top_logprobs` out.",
    "background_options": "Background responses are not served for this model; leave it out.",
    "context_management": "Context compaction is not served for this model; leave it out.",
    "access_programs": "Access programs are not served for this model; leave it out.",
    "image": "Request-level image options are not served for this model; leave them out.",
}
"""Fields a chat server cannot honour, when set to anything but their empty value."""

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def _is_set(value: Any) -> bool:
    if isinstance(value, dict):
        return any(v is not None for v in value.values())
    return value not in (None, False, [], "")


def chat_request(body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """The chat completions body for Responses ``body`` (which already names the served model);
    ``InvalidRequest`` naming the ``param`` a chat server cannot honour."""
    for name, message in _REFUSED.items():
        if _is_set(body.get(name)):
            raise InvalidRequest(message, param=name)
    truncation = body.get("truncation")
    if truncation not in (None, "disabled"):
        raise InvalidRequest("Only `truncation: disabled` is served for this model.", param="truncation")
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _DROPPED and k not in _REFUSED}
    chat["messages"] = messages(body.get("instructions"), body.get("input"))
    tools = body.get("tools")
    if tools:
        chat["tools"] = [_tool(tool, i) for i, tool in enumerate(_list(tools, "tools"))]
    tool_choice = body.get("tool_choice")
    if tool_choice is not None:
        chat["tool_choice"] = _tool_choice(tool_choice)
    max_output_tokens = body.get("max_output_tokens")
    if max_output_tokens is not None:
        chat["max_tokens"] = max_output_tokens
    text = body.get("text")
    if text is not None and not isinstance(text, dict):
        raise InvalidRequest('text must be an object ({"format": {...}}).', param="text")
    if text is not None and text.get("format") is not None:
        response_format = _response_format(text["format"])
        if response_format is not None:
            chat["response_format"] = response_format
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    else:
        chat.pop("stream", None)
    return chat


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidRequest(f"`{param}` must be a list.", param=param)
    return value


def messages(instructions: Any, given: Any) -> list[dict[str, Any]]:
    """``instructions`` and ``input`` as chat messages."""
    out: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions})
    if isinstance(given, str):
        out.append({"role": "user", "content": given})
        return out
    if given is None:
        return out
    for i, item in enumerate(_list(given, "input")):
        if not isinstance(item, dict):
            raise InvalidRequest(f"input[{i}] must be an object.", param=f"input[{i}]")
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, i))
        elif kind == "function_call":
            _append_call(out, item, i)
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _text(output, i)
            out.append({"role": "tool", "tool_call_id": _str(item, "call_id", i), "content": content})
        elif kind == "reasoning":
            continue  # a reasoning model's own notes: nothing a chat server reads
        else:
            raise InvalidRequest(
                f"input[{i}]: items of type `{kind}` are not served for this model.", param=f"input[{i}]"
            )
    return out


def _str(item: dict[str, Any], name: str, i: int) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"input[{i}].{name} must be a non-empty string.", param=f"input[{i}].{name}")
    return value


def _message(item: dict[str, Any], i: int) -> dict[str, Any]:
    role = _ROLES.get(item.get("role", ""))
    if role is None:
        raise InvalidRequest(
            f"input[{i}].role must be user, assistant, system or developer.", param=f"input[{i}].role"
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = _list(content, f"input[{i}].content")
    if role != "user" or all(isinstance(p, dict) and p.get("type") in _TEXT_PARTS for p in parts):
        return {"role": role, "content": _text(parts, i)}
    return {"role": role, "content": [_part(part, i) for part in parts]}


def _text(parts: Any, i: int) -> str:
    """Text parts joined (a function's output may be a list of them too)."""
    if parts is None:
        return ""
    texts = []
    for part in _list(parts, f"input[{i}].content"):
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
            raise InvalidRequest(f"input[{i}]: only text parts are served here.", param=f"input[{i}].content")
        texts.append(str(part.get("text") or part.get("refusal") or ""))
    return "".join(texts)


def _part(part: Any, i: int) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise InvalidRequest(
        f"input[{i}]: parts of type `{kind}` are not served here.", param=f"input[{i}].content"
    )


def _append_call(out: list[dict[str, Any]], item: dict[str, Any], i: int) -> None:
    """A function call joins the assistant message just before it (parallel calls are one message)."""
    arguments = item.get("arguments", "")
    call = {
        "id": _str(item, "call_id", i),
        "type": "function",
        "function": {
            "name": _str(item, "name", i),
            "arguments": arguments if isinstance(arguments, str) else "",
        },
    }
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and isinstance(last.get("content") or "", str):
        last.setdefault("tool_calls", []).append(call)
        return
    out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _tool(tool: Any, i: int) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise InvalidRequest(
            f"tools[{i}]: only function tools are served for this model, not `{kind}`.", param="tools"
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"tools[{i}].name must be a non-empty string.", param="tools")
    function: dict[str, Any] = {"name": name}
    for field in ("description", "parameters", "strict"):
        if tool.get(field) is not None:
            function[field] = tool[field]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequest(
        "tool_choice must be auto, none, required or a function tool for this model.", param="tool_choice"
    )


def _response_format(given: Any) -> dict[str, Any] | None:
    kind = given.get("type") if isinstance(given, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema" and isinstance(given.get("schema"), dict):
        schema: dict[str, Any] = {"name": given.get("name") or "response", "schema": given["schema"]}
        for field in ("description", "strict"):
            if given.get(field) is not None:
                schema[field] = given[field]
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidRequest(
        "text.format must be text, json_object or json_schema with a schema.", param="text.format"
    )
