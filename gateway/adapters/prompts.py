"""Chat messages as one prompt, for native APIs that take only text (Triton's generate extension).

The server's tokenizer has the model's real chat template; a text-only API never applies it, so the
replica's ``chat_template`` names the family's format: ``chatml`` (SmolLM2, Qwen, Hermes),
``llama3``, ``mistral`` (``[INST]``) or ``plain`` (``role: content`` lines). Each ends with the
assistant's turn opened, as ``add_generation_prompt`` does. Content given as parts keeps its text parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway.errors import InvalidRequest

__all__ = ["render_chat"]


def _text(message: Any, index: int) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise InvalidRequest("Each message must be an object.", param=f"messages[{index}]")
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    if not isinstance(role, str) or not isinstance(content, str | None):
        raise InvalidRequest("A message needs a role and text content.", param=f"messages[{index}]")
    return role, content or ""


def _chatml(turns: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return body + "<|im_start|>assistant\n"


def _llama3(turns: Sequence[tuple[str, str]]) -> str:
    body = "".join(
        f"<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>" for role, content in turns
    )
    return "<|begin_of_text|>" + body + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _mistral(turns: Sequence[tuple[str, str]]) -> str:
    out, system = ["<s>"], ""
    for role, content in turns:
        if role == "system":
            system += content + "\n\n"
        elif role == "assistant":
            out.append(f" {content}</s>")
        else:
            out.append(f"[INST] {system}{content} [/INST]")
            system = ""
    return "".join(out)


def _plain(turns: Sequence[tuple[str, str]]) -> str:
    return "".join(f"{role}: {content}\n" for role, content in turns) + "assistant:"


_FORMATS: dict[str, Callable[[Sequence[tuple[str, str]]], str]] = {
    "chatml": _chatml,
    "llama3": _llama3,
    "mistral": _mistral,
    "plain": _plain,
}


def render_chat(messages: Any, template: str) -> str:
    """The prompt for ``messages`` in ``template``'s format; ``InvalidRequest`` for a malformed list."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("`messages` must be a non-empty list.", param="messages")
    return _FORMATS[template]([_text(m, i) for i, m in enumerate(messages)])
