"""Where the text sits in a request's body and in an answer's, as slots a guardrail can read and
rewrite in place.

The request side walks the same fields the token count and the tier classifier read
(``gateway.stages.limits.prompt_tokens``, ``gateway.responses_api.as_messages``): chat
``messages[].content`` (a string or text parts), a completion's ``prompt`` (a string or a list), and
the Responses API's ``instructions`` and ``input`` (a string or items with content). An Anthropic
Messages request is a chat request by the time the pipeline sees it. Each slot names its ``param``
(``messages[1].content``) for the error a block returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

Shape = Literal["chat", "completions", "responses"]


@dataclass(slots=True)
class TextSlot:
    """One string of a decoded JSON body: ``holder[key]``."""

    param: str
    holder: Any
    key: str | int

    @property
    def text(self) -> str:
        value: str = self.holder[self.key]
        return value

    def set(self, text: str) -> None:
        self.holder[self.key] = text


def _content(holder: dict[str, Any], where: str, field: str = "content") -> Iterator[TextSlot]:
    content = holder.get(field)
    if isinstance(content, str):
        yield TextSlot(f"{where}.{field}", holder, field)
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield TextSlot(f"{where}.{field}[{j}].text", part, "text")


def _strings(body: dict[str, Any], field: str) -> Iterator[TextSlot]:
    value = body.get(field)
    if isinstance(value, str):
        yield TextSlot(field, body, field)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str):
                yield TextSlot(f"{field}[{i}]", value, i)
            elif isinstance(item, dict):
                yield from _content(item, f"{field}[{i}]")


def request_slots(shape: Shape, body: dict[str, Any]) -> list[TextSlot]:
    """The prompt's strings of a request body."""
    if shape == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return []
        return [
            slot
            for i, message in enumerate(messages)
            if isinstance(message, dict)
            for slot in _content(message, f"messages[{i}]")
        ]
    if shape == "completions":
        return list(_strings(body, "prompt"))
    slots = list(_strings(body, "instructions"))
    slots.extend(_strings(body, "input"))
    return slots


def answer_slots(shape: Shape, document: Any) -> list[TextSlot]:
    """The answer's strings of a response body (``choices`` or the Responses API's ``output``)."""
    if not isinstance(document, dict):
        return []
    slots: list[TextSlot] = []
    if shape == "responses":
        for i, item in enumerate(document.get("output") or ()):
            if isinstance(item, dict):
                slots.extend(_content(item, f"output[{i}]"))
        return slots
    for i, choice in enumerate(document.get("choices") or ()):
        if not isinstance(choice, dict):
            continue
        if shape == "completions":
            if isinstance(choice.get("text"), str):
                slots.append(TextSlot(f"choices[{i}].text", choice, "text"))
            continue
        for field in ("message", "delta"):
            message = choice.get(field)
            if isinstance(message, dict):
                slots.extend(_content(message, f"choices[{i}].{field}"))
    return slots


__all__ = ["Shape", "TextSlot", "answer_slots", "request_slots"]
