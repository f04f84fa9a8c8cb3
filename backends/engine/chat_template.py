"""Render a Hugging Face chat template with jinja2 the way transformers does."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template raised (``raise_exception``) or could not be rendered; a client error."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


@lru_cache(maxsize=8)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(template)


def render_chat_template(
    template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True, **context: Any
) -> str:
    """The prompt text for ``messages``; extra context (bos_token, eos_token, tools...) is passed through."""
    try:
        return _compile(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **context
        )
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template failed: {exc}") from exc
