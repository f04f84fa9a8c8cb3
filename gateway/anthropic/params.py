"""A chat server's error about the translated request, said in the Messages request's own terms.

A Messages request runs as the chat completions request it means (``request.to_chat``), so an
upstream's 400 names that request's fields: ``messages[1].content`` where a system prompt took the
first chat message, ``tools[0].function.parameters`` for ``tools.0.input_schema``, ``stop`` for
``stop_sequences``. The client wrote none of those. ``MessagesParams`` names the field the client sent,
in Anthropic's dotted style (``messages.0.content``), both as the error's parameter and where the
message starts with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MessagesParams"]

_PATH = re.compile(r"(?P<head>[A-Za-z_]\w*)(?P<rest>(?:\[\d+\]|\.[A-Za-z_]\w*)*)")
_STEP = re.compile(r"\[(\d+)\]|\.(\w+)")
_RENAMED = {
    "max_completion_tokens": "max_tokens",
    "stop": "stop_sequences",
    "user": "metadata.user_id",
    "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
}


@dataclass(frozen=True, slots=True)
class MessagesParams:
    """The Messages fields one translated request came from."""

    sources: Sequence[str] = ()
    """Each chat message's source: ``system``, ``messages.2`` (a turn), ``messages.2.content`` (a user
    turn's text and images) or ``messages.2.content.0`` (a tool result block)."""
    output_field: str = "output_config.format"
    """Where the request asked for structured output (``output_format`` in older clients)."""

    def param(self, param: str) -> str:
        """The Messages field a chat request's field came from (itself, dotted, when it is not one)."""
        match = _PATH.fullmatch(param)
        return param if match is None else self._renamed(match)

    def message(self, message: str) -> str:
        """``message`` with a chat field path at its start (``tools[0].function.parameters (f): ...``)
        renamed; a path without an index (a plain word) is left as it is."""
        match = _PATH.match(message)
        if match is None or "[" not in match.group(0):
            return message
        return self._renamed(match) + message[match.end() :]

    def _renamed(self, match: re.Match[str]) -> str:
        head = match.group("head")
        steps = [index or name for index, name in _STEP.findall(match.group("rest"))]
        has_index = bool(steps) and steps[0].isdigit()
        if head == "messages":
            if has_index and int(steps[0]) < len(self.sources):
                return self.sources[int(steps[0])]  # the chat message's own fields are not the turn's
            return "messages"
        if head == "tools" and has_index:
            rest = steps[1:]
            if rest[:1] == ["function"]:
                rest = rest[1:]
            if rest[:1] == ["parameters"]:
                rest = ["input_schema", *rest[1:]]
            return ".".join(["tools", steps[0], *rest])
        if head == "response_format":
            return self.output_field
        return ".".join([_RENAMED.get(head, head), *steps])
