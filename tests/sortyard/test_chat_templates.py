"""The chat-template environment the engine and the gateway share: HF's whitespace rules, ``tojson``
keeping text as it is, ``raise_exception`` as a template error, and no escape from the sandbox."""

from __future__ import annotations

import jinja2
import pytest

from sortyard.chat_templates import template_environment


def test_a_template_renders_as_transformers_does() -> None:
    template = template_environment().from_string(
        "{% for m in messages %}\n<|{{ m.role }}|>{{ m.content | tojson }}\n{% endfor %}"
    )
    assert template.render(messages=[{"role": "user", "content": "héllo"}]) == '<|user|>"héllo"\n'


def test_raise_exception_is_a_template_error_and_the_sandbox_holds() -> None:
    env = template_environment()
    with pytest.raises(jinja2.TemplateError, match="roles must alternate"):
        env.from_string("{{ raise_exception('roles must alternate') }}").render()
    with pytest.raises(jinja2.TemplateError):  # SecurityError: no reaching into Python from a template
        env.from_string("{{ ''.__class__.__mro__ }}").render()
