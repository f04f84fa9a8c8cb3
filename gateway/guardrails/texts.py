"""Where the text sits in a request's body and in an answer's, as slots a guardrail can read and
rewrite in place.

The request side walks the same fields the token count and the tier classifier read
(``gateway.stages.limits.prompt_tokens``, ``gateway.responses_api.as_messages``): chat
``messages[].content`` (a string or text parts), a completion's ``prompt`` (a string or a list), and
the Responses API's ``instructions`` and ``input`` (a string or items with content, or a tool's
``output``: a ``function_call_output`` is the tool result a chat ``role: tool`` message would be). An
Anthropic Messages request is a chat request by the time the pipeline sees it. Each slot names its
``param`` (``messages[1].content``) for the error a block returns.

The answer side reads every text the client is shown: a chat message's (or delta's) ``content``,
``refusal`` and reasoning (``reasoning_content``, ``reasoning``), a completion's ``text``, and a
Responses item's content parts (``text``, a refusal part's ``refusal``) and reasoning ``summary``.
An answer slot knows what holds its token ``logprobs`` (the choice, or the Responses content part):
the logprobs' token strings spell the raw text, and cannot be redacted token by token in a way that
stays true to the redacted text, so rewriting the text drops them (see ``TextSlot.set``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

Shape = Literal["chat", "completions", "responses"]
MESSAGE_FIELDS = ("content", "refusal", "reasoning_content", "reasoning")
"""The texts of a chat answer's message or delta."""
_PART_KEYS = ("text", "refusal")
_REQUEST_ITEM_FIELDS = ("content", "output")
_ANSWER_ITEM_FIELDS = ("content", "summary")


@dataclass(slots=True)
class TextSlot:
    """One string of a decoded JSON body: ``holder[key]``."""

    param: str
    holder: Any
    key: str | int
    field: str = ""
    """The answer field the text is of (``content``, ``refusal``, ...): a stream carries each apart."""
    owner: dict[str, Any] | None = None
    """What the text belongs to and what holds its ``logprobs``: a chat or completion choice, a
    Responses content part."""

    @property
    def text(self) -> str:
        value: str = self.holder[self.key]
        return value

    def set(self, text: str) -> None:
        """Rewrites the text; a changed answer text drops its logprobs, which would still spell out
        what was redacted (null for a choice's, an empty list for a Responses part's)."""
        if text != self.holder[self.key]:
            drop_logprobs(self.owner)
        self.holder[self.key] = text


def drop_logprobs(holder: dict[str, Any] | None) -> bool:
    """Empties ``holder["logprobs"]`` (a list to ``[]``, anything else to null); True when it held some."""
    if holder is None:
        return False
    value = holder.get("logprobs")
    if not value:
        return False
    holder["logprobs"] = [] if isinstance(value, list) else None
    return True


def _content(
    holder: dict[str, Any], where: str, field: str = "content", owner: dict[str, Any] | None = None
) -> Iterator[TextSlot]:
    content = holder.get(field)
    if isinstance(content, str):
        yield TextSlot(f"{where}.{field}", holder, field, field, owner)
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            for key in _PART_KEYS:
                if isinstance(part.get(key), str):
                    yield TextSlot(
                        f"{where}.{field}[{j}].{key}", part, key, field, part if owner is None else owner
                    )


def _item(item: dict[str, Any], where: str, fields: tuple[str, ...]) -> Iterator[TextSlot]:
    for field in fields:
        yield from _content(item, where, field)


def _strings(body: dict[str, Any], field: str) -> Iterator[TextSlot]:
    value = body.get(field)
    if isinstance(value, str):
        yield TextSlot(field, body, field)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str):
                yield TextSlot(f"{field}[{i}]", value, i)
            elif isinstance(item, dict):
                yield from _item(item, f"{field}[{i}]", _REQUEST_ITEM_FIELDS)


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
                slots.extend(_item(item, f"output[{i}]", _ANSWER_ITEM_FIELDS))
        return slots
    for i, choice in enumerate(document.get("choices") or ()):
        if not isinstance(choice, dict):
            continue
        if shape == "completions":
            if isinstance(choice.get("text"), str):
                slots.append(TextSlot(f"choices[{i}].text", choice, "text", "text", choice))
            continue
        for kind in ("message", "delta"):
            message = choice.get(kind)
            if isinstance(message, dict):
                for field in MESSAGE_FIELDS:
                    slots.extend(_content(message, f"choices[{i}].{kind}", field, choice))
    return slots


__all__ = ["MESSAGE_FIELDS", "Shape", "TextSlot", "answer_slots", "drop_logprobs", "request_slots"]
