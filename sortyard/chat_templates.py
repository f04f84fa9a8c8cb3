"""The Jinja environment Hugging Face chat templates are written for, shared by the engine (which renders
a request's prompt) and the gateway (which renders it to find the prompt's cached blocks): both must
turn the same messages into the same text.

Sandboxed and immutable, ``trim_blocks`` and ``lstrip_blocks`` with loop controls, as transformers
renders them; ``tojson`` keeps non-ASCII text as it is; a template's ``raise_exception(message)`` raises
``jinja2.TemplateError``. Imports jinja2: import this module only where templates are rendered.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["template_environment"]


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


def template_environment() -> ImmutableSandboxedEnvironment:
    """A fresh environment for chat templates (compile each template once and keep it)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env
