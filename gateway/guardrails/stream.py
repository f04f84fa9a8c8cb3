"""A streamed answer checked as it goes: each event is passed on when it comes, its text redacted.

A pattern can straddle two deltas (``john.doe@exa`` | ``mple.com``), so of each choice's text the
trailing partial word is carried over into the next delta (with the words before it that could be
part of a number, a grouped IBAN or a block-list phrase), at most ``MAX_CARRY_CHARS``: the event
still goes out at once, with the text before the carry-over. No event is held back; only that tail
of text waits, until the next word begins (usually the next event). The finishing event (or,
when none comes, one made for it before ``[DONE]``) carries what is left. A ``block`` ends the
stream with an OpenAI-shaped error event and ``[DONE]``; the rest of the upstream's events are
dropped.

Chat and completion chunks carry over per choice and field (``content``, ``refusal``,
``reasoning_content``, ``reasoning``: one field's tail goes out when its choice's delta brings another
field, or finishes); the Responses API's typed events per content part
(``gateway.guardrails.responses_stream``: the part's tail goes out as one more delta event before the
event that ends the part, and the ``sequence_number`` of every later event moves up to make room).

Every chunk's ``logprobs`` go (null; a Responses event's an empty list): their token strings spell
the upstream's text as it came, before the checks, and the tokens of a carried tail would go out
before the tail is known to be clean. Only a stream whose output guardrails apply pays for this.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.guardrails.guard import GuardSet, Verdict
from gateway.guardrails.responses_stream import TypedCarry
from gateway.guardrails.texts import Shape, answer_slots, drop_logprobs

MAX_CARRY_CHARS = 256
_DONE = b"data: [DONE]\n\n"
# a word that may be part of a pattern with spaces in it (a grouped card, phone, IBAN, NINO, Bearer)
_GROUPED = re.compile(r"[A-Z0-9+().-]+|[Bb]earer|BEARER")
OnVerdict = Callable[[GuardSet, Verdict], None]


def _split(text: str, hold_words: int) -> int:
    """Where the text to send ends and the carry-over starts."""
    end = len(text)
    while end and not text[end - 1].isspace():  # the trailing partial word
        end -= 1
    num_held = 0
    while end:  # words a block-list phrase may still need; grouped digits and codes that may go on
        word_end = len(text[:end].rstrip())
        start = max(text.rfind(" ", 0, word_end), text.rfind("\n", 0, word_end)) + 1
        if num_held >= hold_words and not _GROUPED.fullmatch(text[start:word_end]):
            break
        num_held += 1
        end = start
    return max(end, len(text) - MAX_CARRY_CHARS)


class StreamGuard:
    """Applies the output checks of ``guards`` to one stream of SSE events."""

    def __init__(self, shape: Shape, guards: tuple[GuardSet, ...], on_verdict: OnVerdict) -> None:
        self.shape = shape
        self.guards = guards
        self.on_verdict = on_verdict
        self.hold_words = max((g.phrase_words for g in guards), default=1) - 1
        self.carry: dict[tuple[int, str], str] = {}
        """Each choice's carried-over text, by its index and field (``content``, ``refusal``, ...)."""
        self.template: dict[str, Any] | None = None
        self.typed = TypedCarry(lambda text: self._scan(text, _split(text, self.hold_words)), self._scan_all)
        self.is_blocked = False
        self._buffer = b""

    async def relay(self, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in events:
                out = self.feed(chunk)
                if out:
                    yield out
                if self.is_blocked:
                    return
            tail = self._flush_carry()
            if tail:
                yield tail
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    def feed(self, chunk: bytes) -> bytes:
        data = self._buffer + chunk if self._buffer else chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._buffer = data
            return b""
        self._buffer = data[end + 2 :]
        out: list[bytes] = []
        for event in data[: end + 2].split(b"\n\n")[:-1]:
            out.append(self._event(event + b"\n\n"))
            if self.is_blocked:
                break
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        at = event.find(b"data:")
        if at < 0:
            return event
        payload = event[at + 5 :].strip()
        if payload == b"[DONE]":
            tail = self._flush_carry()
            return tail if self.is_blocked else tail + event  # a block's error event ends with its own
        try:
            document = msgspec.json.decode(payload)
        except msgspec.DecodeError:
            return event
        if not isinstance(document, dict) or (
            document.get("error") is not None and self.shape != "responses"
        ):
            tail = self._flush_carry()
            return tail if self.is_blocked else tail + event
        before = b""
        if self.shape == "responses":
            added, changed = self.typed.event(document)
            before = b"".join(map(_typed_event, added))
        else:
            changed = self._choices(document)
        if self.is_blocked:
            return self._blocked()
        if not changed:
            return before + event
        return before + event[:at] + b"data: " + msgspec.json.encode(document) + b"\n\n"

    def _choices(self, document: dict[str, Any]) -> bool:
        self.template = document
        changed = False
        for choice in document.get("choices") or ():  # token strings would spell what a carry hides
            if isinstance(choice, dict):
                changed = drop_logprobs(choice) or changed
        fields: dict[int, set[str]] = {}
        for slot in answer_slots(self.shape, document):
            choice = slot.owner or {}
            index = choice.get("index", 0)
            fields.setdefault(index, set()).add(slot.field)
            text = self.carry.pop((index, slot.field), "") + slot.text
            cut = len(text) if choice.get("finish_reason") else _split(text, self.hold_words)
            text, cut = self._scan(text, cut)
            if cut < len(text):
                self.carry[(index, slot.field)] = text[cut:]
            if text[:cut] != slot.text:
                slot.set(text[:cut])
                changed = True
        for choice in document.get("choices") or ():
            if isinstance(choice, dict) and self.carry:
                changed = self._release(choice, fields.get(choice.get("index", 0))) or changed
        return changed

    def _release(self, choice: dict[str, Any], fields: set[str] | None) -> bool:
        """Puts into ``choice`` what it carries of the texts that ended: all of them when it
        finishes; else those of another field than the ones its delta brings (a reasoning ends when
        the content begins). True when some was put in."""
        index = choice.get("index", 0)
        if choice.get("finish_reason"):
            ended = [key for key in self.carry if key[0] == index]
        elif fields:
            ended = [key for key in self.carry if key[0] == index and key[1] not in fields]
        else:
            return False
        for key in ended:
            rest = self._scan_all(self.carry.pop(key))
            if self.shape == "completions":
                choice["text"] = rest
            else:
                delta = choice.get("delta")
                if not isinstance(delta, dict):
                    delta = choice["delta"] = {}
                delta[key[1]] = rest
        return bool(ended)

    def _scan(self, text: str, end: int) -> tuple[str, int]:
        """``text`` with what may go out now (``text[:end]``, ``end`` as the checks moved it) checked."""
        if not text or self.is_blocked:
            return text, end
        for guard in self.guards:
            verdict = guard.scan(text, "output", end if end < len(text) else None)
            if verdict.actions:
                self.on_verdict(guard, verdict)
            if verdict.blocked_by is not None:
                self.is_blocked = True
                return text, end
            text, end = verdict.text, verdict.end
        return text, end

    def _scan_all(self, text: str) -> str:
        return self._scan(text, len(text))[0]

    def _flush_carry(self) -> bytes:
        """What is left of each choice's text, as one more event (before ``[DONE]`` or the end)."""
        if self.shape == "responses":
            added = b"".join(map(_typed_event, self.typed.flush()))
            return self._blocked() if self.is_blocked else added
        if not self.carry or self.template is None:
            self.carry.clear()
            return b""
        choices: dict[int, dict[str, Any]] = {}
        for (index, field), text in sorted(self.carry.items(), key=lambda item: item[0][0]):
            ready = self._scan_all(text)
            choice = choices.setdefault(index, {"index": index, "finish_reason": None})
            if self.shape == "completions":
                choice["text"] = ready
            else:
                choice.setdefault("delta", {})[field] = ready
        self.carry.clear()
        if self.is_blocked:
            return self._blocked()
        document = {k: v for k, v in self.template.items() if k not in ("choices", "usage")}
        document["choices"] = list(choices.values())
        return b"data: " + msgspec.json.encode(document) + b"\n\n"

    def _blocked(self) -> bytes:
        error = InvalidRequest("The answer was blocked by a guardrail.", code="guardrail_blocked")
        return error.to_sse() + _DONE


def _typed_event(document: dict[str, Any]) -> bytes:
    return b"event: " + str(document["type"]).encode() + b"\ndata: " + msgspec.json.encode(document) + b"\n\n"


__all__ = ["MAX_CARRY_CHARS", "StreamGuard"]
