"""Render a Hugging Face chat template with jinja2 the way transformers does."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2
import jinja2.meta

from sortyard.chat_templates import template_environment

GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    '    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n'
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    '        {%- set role = "model" -%}\n'
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)
"""Gemma 3's chat template as Google ships it in the instruction-tuned models' tokenizer_config.json
(GGUF files of Gemma 3 carry none): ``<bos><start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n``,
a system prompt folded into the first user turn, the assistant role written ``model``."""


class ChatTemplateError(ValueError):
    """The template raised (``raise_exception``) or could not be rendered; a client error."""


@lru_cache(maxsize=8)
def _compile(template: str) -> jinja2.Template:
    return template_environment().from_string(template)


@lru_cache(maxsize=8)
def template_variables(template: str) -> frozenset[str]:
    """The context names a template reads (``messages``, ``tools``, ...); empty if it does not parse.

    A template that reads ``tools`` renders tool definitions itself (Qwen, Llama 3.1, Hermes); others
    get them written into the system prompt by the server (``backends/serving/tools/template.py``).
    """
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(template_environment().parse(template)))
    except jinja2.TemplateError:
        return frozenset()


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
