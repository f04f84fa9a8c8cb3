"""Prompts to token ids: chat messages through the model's chat template, or a raw completion prompt."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from backends.serving.errors import InvalidRequest
from backends.serving.protocol import ChatMessage, MessageToolCall
from backends.serving.tools.spec import ToolRequest
from backends.serving.tools.template import has_native_tools, tool_prompt

ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
OFFLOAD_PROMPT_CHARS = 16_384
"""Longer prompts are tokenised in a worker thread so the event loop keeps streaming."""


def render_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as a chat template expects them: role and plain-string content, plus an assistant's
    ``tool_calls`` (arguments as objects, as transformers passes them) and a tool result's
    ``tool_call_id`` and ``name``."""
    if not messages:
        raise InvalidRequest("messages must be a non-empty list", param="messages")
    rendered: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if message.role not in ROLES:
            raise InvalidRequest(f"Unknown role {message.role!r}", param=f"messages[{i}].role")
        content = message.content
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        else:
            for part in content:
                if part.type != "text" or part.text is None:
                    raise InvalidRequest(
                        f"Only text content parts are supported, got {part.type!r}",
                        param=f"messages[{i}].content",
                    )
            text = "\n".join(part.text or "" for part in content)
        # templates written before OpenAI's "developer" role know it as "system"
        role = "system" if message.role == "developer" else message.role
        entry: dict[str, Any] = {"role": role, "content": text}
        if message.tool_calls and role == "assistant":
            entry["tool_calls"] = [_call(call, f"messages[{i}].tool_calls") for call in message.tool_calls]
        if role == "tool":
            entry["tool_call_id"] = message.tool_call_id
            if message.name is not None:
                entry["name"] = message.name
        rendered.append(entry)
    return rendered


def _call(call: MessageToolCall, where: str) -> dict[str, Any]:
    arguments: Any = call.function.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise InvalidRequest(f"{where}: function.arguments is not valid JSON", param=where) from None
    entry = {"type": "function", "function": {"name": call.function.name, "arguments": arguments}}
    return entry if call.id is None else {"id": call.id, **entry}


async def chat_prompt_ids(
    tokenizer: Any,
    messages: list[ChatMessage],
    *,
    add_generation_prompt: bool = True,
    tools: ToolRequest | None = None,
) -> list[int]:
    """Token ids of the messages (and tools) rendered with the tokenizer's chat template."""
    prompt = tool_prompt(render_messages(messages), tools, is_native=has_native_tools(tokenizer))
    try:
        text = tokenizer.apply_chat_template(
            prompt.messages, add_generation_prompt=add_generation_prompt, **prompt.context
        )
    except Exception as exc:  # the template's own complaint (jinja raises its own error types)
        raise InvalidRequest(f"The messages do not fit the chat template: {exc}", param="messages") from exc
    # the template already wrote any special tokens
    return await _encode(tokenizer, text, add_special_tokens=False)


async def completion_prompt_ids(tokenizer: Any, prompt: str | list[Any]) -> list[int]:
    """The prompt as token ids: a string, a list of token ids, or a list of one string."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        # a raw prompt gets the tokenizer's special tokens (BOS where the model wants one), as in vLLM
        return await _encode(tokenizer, prompt, add_special_tokens=True)
    if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        vocab_size = getattr(tokenizer, "vocab_size", None)
        if any(t < 0 or (vocab_size is not None and t >= vocab_size) for t in prompt):
            raise InvalidRequest("prompt token ids must be in [0, vocab_size)", param="prompt")
        return list(prompt)
    raise InvalidRequest(
        "prompt must be a string, a list of token ids, or a list of one string (batched prompts are not "
        "supported)",
        param="prompt",
    )


async def _encode(tokenizer: Any, text: str, *, add_special_tokens: bool) -> list[int]:
    if len(text) > OFFLOAD_PROMPT_CHARS:
        return list(await asyncio.to_thread(tokenizer.encode, text, add_special_tokens))
    return list(tokenizer.encode(text, add_special_tokens))
