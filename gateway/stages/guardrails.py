"""Stage: guardrails on the prompt and on the answer (``gateway.guardrails``).

The sets that apply are the pool's ``guardrails`` then the key's, by name. On input every string of
the prompt (``gateway.guardrails.texts``) is checked before the cache and the upstream, so cached
answers are keyed on the redacted prompt and the span and the upstream see only that: a ``block`` is
a 400 ``guardrail_blocked`` naming the message (``param``), a redaction rewrites the body. On output
a result filter, put first so every other filter (the cache, the stored response) sees what the
client sees, checks a plain answer (and rewrites its body in place) or a stream event by event
(``gateway.guardrails.stream``). Every action is counted (``on_action``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec

from gateway.errors import InvalidRequest
from gateway.guardrails.config import Side
from gateway.guardrails.guard import Guardrails, GuardSet, Verdict
from gateway.guardrails.stream import StreamGuard
from gateway.guardrails.texts import Shape, TextSlot, answer_slots, request_slots
from gateway.pipeline import BytesResult, Call, Endpoint, ResultFilter, StreamResult

OnAction = Callable[[str, str, str, str], None]
"""(guardrail, check, stage, action): ``GuardrailMetrics.count``."""

_WHAT: dict[Side, str] = {"input": "request", "output": "answer"}
_SHAPES: dict[Endpoint, Shape] = {
    Endpoint.CHAT: "chat",
    Endpoint.COMPLETIONS: "completions",
    Endpoint.RESPONSES: "responses",
}


def _ignore(guardrail: str, check: str, stage: str, action: str) -> None:
    pass


def blocked(guard: GuardSet, verdict: Verdict, param: str | None, what: str) -> InvalidRequest:
    """The error a block answers with; it names the set and the check, never the text."""
    because = f": {verdict.reason}" if verdict.reason else ""
    return InvalidRequest(
        f"The {what} was blocked by guardrail {guard.name!r} ({verdict.blocked_by}){because}.",
        param=param,
        code="guardrail_blocked",
    )


class GuardrailsStage:
    """Checks and redacts prompts; registers the check of the answer."""

    name = "guardrails"
    endpoints = frozenset(_SHAPES)

    def __init__(self, guardrails: Guardrails, *, on_action: OnAction = _ignore) -> None:
        self.guardrails = guardrails
        self.on_action = on_action

    async def __call__(self, call: Call) -> None:
        pool = call.policy.pools.get(call.pool or "")
        names = (*(pool.guardrails if pool is not None else ()), *(call.key.guardrails if call.key else ()))
        if not names:
            return
        guards = self.guardrails.sets(call.policy.guardrails, tuple(dict.fromkeys(names)))
        shape = _SHAPES[call.endpoint]
        inputs = tuple(guard for guard in guards if guard.applies("input"))
        if inputs:
            await self._check_slots(call, request_slots(shape, call.body), inputs, "input")
        outputs = tuple(guard for guard in guards if guard.applies("output"))
        if outputs:
            call.result_filters.insert(0, self._output(shape, outputs))
            call.guards_output = True  # spans must not record the answer before the filter redacts it

    def _count(self, guard: GuardSet, verdict: Verdict, side: str) -> None:
        for check, action in verdict.actions:
            self.on_action(guard.name, check, side, action)

    def _output(self, shape: Shape, guards: tuple[GuardSet, ...]) -> ResultFilter:
        async def apply(call: Call, result: BytesResult | StreamResult) -> BytesResult | StreamResult:
            if isinstance(result, StreamResult):
                stream = StreamGuard(shape, guards, lambda g, v: self._count(g, v, "output"))
                result.events = stream.relay(result.events)
            elif result.status == 200:
                await self._check_body(call, shape, guards, result)
            return result

        return apply

    async def _check_body(
        self, call: Call, shape: Shape, guards: tuple[GuardSet, ...], result: BytesResult
    ) -> None:
        """Redacts a plain answer in place (the cache stores ``call.result``: the redacted one)."""
        try:
            document = msgspec.json.decode(result.body)
        except msgspec.DecodeError:
            return
        if await self._check_slots(call, answer_slots(shape, document), guards, "output"):
            result.body = msgspec.json.encode(document)

    async def _check_slots(
        self, call: Call, slots: list[TextSlot], guards: tuple[GuardSet, ...], side: Side
    ) -> bool:
        """Checks and rewrites each slot; raises the first block (in slot order). With a webhook the
        slots are checked concurrently (one round trip, not one a message); without, one by one, and
        a block stops the rest. True when a slot was rewritten."""
        if any(side in guard.webhook_sides for guard in guards):
            outcomes = await asyncio.gather(*(self._check_text(call, guards, s.text, side) for s in slots))
        else:
            outcomes = []
            for slot in slots:
                outcomes.append(await self._check_text(call, guards, slot.text, side))
                if outcomes[-1][1] is not None:
                    break
        changed = False
        for slot, (text, guard, verdict) in zip(slots, outcomes, strict=False):
            if guard is not None and verdict is not None:
                raise blocked(guard, verdict, slot.param if side == "input" else None, _WHAT[side])
            if text is not slot.text:
                slot.set(text)
                changed = True
        return changed

    async def _check_text(
        self, call: Call, guards: tuple[GuardSet, ...], text: str, side: Side
    ) -> tuple[str, GuardSet | None, Verdict | None]:
        """The text after every set, or the set and verdict that blocked it."""
        for guard in guards:
            verdict = await guard.check(text, side, tenant=call.tenant, model=call.model)
            self._count(guard, verdict, side)
            if verdict.blocked_by is not None:
                return text, guard, verdict
            text = verdict.text
        return text, None, None


__all__ = ["GuardrailsStage", "OnAction", "blocked"]
