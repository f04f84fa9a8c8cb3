"""The Responses API's typed events checked with the carry-over of a stream (``TypedCarry``), for
``StreamGuard``.

The text of a part comes as ``response.output_text.delta`` events (``response.refusal.delta``,
``response.reasoning_text.delta``, ``response.reasoning_summary_text.delta`` alike), so a pattern
can straddle two of them as it can two chat chunks. Each part, named by the delta's type and its
``item_id``, ``output_index`` and ``content_index`` (or ``summary_index``), carries the tail of its
text over into its next delta as a chat choice does; every event still goes out when it comes, with
the text before the carry-over. The event that ends the part (its ``.done``, the content part's or
the item's ``.done``, ``response.completed``, ``response.failed``, ``response.incomplete``, an
``error``; else ``[DONE]`` or the end of the stream) is preceded by one more delta event of that part
with what was carried. That event takes the ``sequence_number`` the ending event had, and every later
event's number moves up by one for each event put in, so the numbers stay strictly increasing; a
stream without numbers gets none. Complete texts (a ``.done`` event's ``text`` or ``refusal``, the
parts and output of ``response.completed``, a reasoning summary's) and the deltas of other events
are checked whole, event by event. Every ``logprobs`` is emptied: its token strings would spell out
the text before the checks (and the carried tail before it goes out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.guardrails.texts import drop_logprobs

CARRIED = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
    }
)
"""The delta events whose text carries over from one event to the next."""
_TEXT_KEYS = frozenset({"delta", "text", "refusal"})
_IDS = ("item_id", "output_index", "content_index", "summary_index")
_LAST = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
Hold = Callable[[str], tuple[str, int]]
"""A part's text checked, and where what may go out now ends (the rest is carried over)."""
Check = Callable[[str], str]
"""A complete text checked."""


@dataclass(slots=True)
class _Part:
    """One part's carried-over text, and what the event that brings it out needs."""

    kind: str
    ids: dict[str, Any]
    has_logprobs: bool
    text: str = ""

    def event(self, text: str, number: int | None) -> dict[str, Any]:
        document: dict[str, Any] = {"type": self.kind, **self.ids, "delta": text}
        if self.has_logprobs:
            document["logprobs"] = []
        if number is not None:
            document["sequence_number"] = number
        return document


class TypedCarry:
    """The carry-over of one Responses stream: its parts' tails and how far the numbers moved."""

    def __init__(self, hold: Hold, check: Check) -> None:
        self.hold = hold
        self.check = check
        self.parts: dict[tuple[Any, ...], _Part] = {}
        self.num_added = 0
        """Events put in so far: each later event's ``sequence_number`` moves up by that many."""
        self.last_number: int | None = None
        """The last ``sequence_number`` sent, as renumbered."""

    def event(self, document: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """The events to send before ``document`` (the parts it ends, with their carried text), and
        whether ``document`` was changed in place (its text checked, its number moved)."""
        kind = document.get("type")
        before: list[dict[str, Any]] = []
        if kind in CARRIED and isinstance(document.get("delta"), str):
            changed = self._delta(str(kind), document)
            changed = drop_logprobs(document) or changed
        else:
            ended = [self.parts.pop(key) for key in self._ended(document)]
            before = [part.event(self.check(part.text), None) for part in ended]
            changed = check_strings(document, self.check)
        number = document.get("sequence_number")
        if isinstance(number, int) and not isinstance(number, bool):
            for added in before:
                added["sequence_number"] = number + self.num_added
                self.num_added += 1
            if self.num_added:
                document["sequence_number"] = number + self.num_added
                changed = True
            self.last_number = document["sequence_number"]
        else:
            self._number(before)
        return before, changed

    def flush(self) -> list[dict[str, Any]]:
        """What every part still carries, as one more delta event each (before ``[DONE]`` or the end)."""
        before = [part.event(self.check(part.text), None) for part in self.parts.values()]
        self.parts.clear()
        self._number(before)
        return before

    def _delta(self, kind: str, document: dict[str, Any]) -> bool:
        ids = {name: document[name] for name in _IDS if name in document}
        key = (kind, *(ids.get(name) for name in _IDS))
        part = self.parts.pop(key, None) or _Part(kind, ids, "logprobs" in document)
        delta: str = document["delta"]
        text, cut = self.hold(part.text + delta)
        if cut < len(text):
            part.text = text[cut:]
            self.parts[key] = part
        if text[:cut] == delta:
            return False
        document["delta"] = text[:cut]
        return True

    def _ended(self, document: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The parts ``document`` ends: all of them for the last event or an error; for a ``.done``
        event, those whose ids it names (an item's ``.done`` names the item's ``id`` in ``item``)."""
        kind = document.get("type")
        if kind in _LAST or document.get("error") is not None:
            return list(self.parts)
        if not isinstance(kind, str) or not kind.endswith(".done"):
            return []
        ids = {name: document[name] for name in _IDS if name in document}
        item = document.get("item")
        if "item_id" not in ids and isinstance(item, dict) and "id" in item:
            ids["item_id"] = item["id"]
        if not ids:
            return []
        return [
            key
            for key, part in self.parts.items()
            if all(part.ids.get(name) == value for name, value in ids.items())
        ]

    def _number(self, added: list[dict[str, Any]]) -> None:
        """Numbers the events put in where no numbered event follows: after the last one sent."""
        if self.last_number is None:
            return
        for document in added:
            self.last_number += 1
            self.num_added += 1
            document["sequence_number"] = self.last_number


def check_strings(document: Any, check: Check) -> bool:
    """Checks every ``delta``, ``text`` and ``refusal`` string of ``document`` in place, and drops
    every ``logprobs`` (their tokens spell the unchecked text); True when one changed."""
    changed = False
    if isinstance(document, dict):
        for key, value in document.items():
            if key in _TEXT_KEYS and isinstance(value, str) and value:
                ready = check(value)
                if ready != value:
                    document[key], changed = ready, True
            elif key == "logprobs":
                changed = drop_logprobs(document) or changed
            elif isinstance(value, dict | list):
                changed = check_strings(value, check) or changed
    elif isinstance(document, list):
        for item in document:
            changed = check_strings(item, check) or changed
    return changed


__all__ = ["CARRIED", "TypedCarry", "check_strings"]
