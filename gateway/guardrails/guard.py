"""A named guardrail set compiled once per policy (``GuardSet``), and what checking one text gave
(``Verdict``). ``Guardrails`` holds the compiled sets of the policy in force.

The local checks (patterns, block list) run first and all together: a ``block`` finding wins over
any redaction; otherwise every finding is redacted. The webhook, if the set has one for this side,
then sees the text as redacted so far (a secret is never sent to a third party).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.guardrails.block_list import BlockList
from gateway.guardrails.config import Action, GuardrailSet, Side
from gateway.guardrails.findings import Finding, redact
from gateway.guardrails.pii import PiiDetector
from gateway.guardrails.secrets import SecretDetector
from gateway.guardrails.webhook import Webhook
from gateway.replicas.client import UpstreamClient


class Detector(Protocol):
    def find(self, text: str) -> list[Finding]: ...


@dataclass(slots=True)
class Verdict:
    """The outcome of checking one text against one set."""

    text: str
    """The text to use from now on (redacted, or as it was)."""
    actions: list[tuple[str, Action]] = field(default_factory=list)
    """(check, action) for each finding acted on: ``("email", "redact")``, ``("webhook", "block")``."""
    blocked_by: str | None = None
    """The check that blocked the text; None: it may pass."""
    reason: str | None = None
    """The webhook's reason for a block, when it gave one."""
    end: int = 0
    """Where the part of ``text`` that was checked whole ends (all of it but for a stream's tail)."""


@dataclass(frozen=True, slots=True)
class _Local:
    detector: Detector
    action: Action
    sides: frozenset[Side]


class GuardSet:
    """One ``GuardrailSet``'s checks, built once per policy."""

    def __init__(self, name: str, config: GuardrailSet, client: UpstreamClient | None) -> None:
        self.name = name
        local: list[_Local] = []
        if config.pii is not None and config.pii.detect:
            local.append(
                _Local(PiiDetector(config.pii.detect), config.pii.action, frozenset(config.pii.stages))
            )
        if config.secrets is not None and config.secrets.detect:
            check = config.secrets
            local.append(_Local(SecretDetector(check.detect), check.action, frozenset(check.stages)))
        if config.block_list is not None and config.block_list.words:
            check_b = config.block_list
            local.append(_Local(BlockList(check_b.words), check_b.action, frozenset(check_b.stages)))
        self.phrase_words = (
            max((len(e.split()) for e in config.block_list.words), default=1)
            if (config.block_list is not None)
            else 1
        )
        """The most words in one block-list entry (a stream carries that many over)."""
        self.local = {side: tuple(c for c in local if side in c.sides) for side in ("input", "output")}
        webhook = config.webhook
        self.webhook = Webhook(webhook, client) if webhook is not None and client is not None else None
        self.webhook_sides = frozenset(webhook.stages) if webhook is not None else frozenset()

    def applies(self, side: Side) -> bool:
        return bool(self.local[side]) or side in self.webhook_sides

    def scan(self, text: str, side: Side, end: int | None = None) -> Verdict:
        """The local checks only. ``end`` (a stream's): only ``text[:end]`` goes out now, the rest
        waits for more text; a finding that crosses ``end`` moves it back to the finding's start (it
        goes out whole, later), and only what lies before ``end`` is acted on."""
        blocks: list[Finding] = []
        redactions: list[Finding] = []
        for check in self.local[side]:
            found = check.detector.find(text)
            if found:
                (blocks if check.action == "block" else redactions).extend(found)
        if end is None:
            end = len(text)
        else:
            end = _settle(end, blocks + redactions)
            blocks = [f for f in blocks if f.end <= end]
            redactions = [f for f in redactions if f.end <= end]
        verdict = Verdict(text, end=end)
        if blocks:
            verdict.blocked_by = blocks[0].kind
            verdict.actions.append((blocks[0].kind, "block"))
        elif redactions:
            verdict.actions.extend((f.kind, "redact") for f in redactions)
            prefix = redact(text[:end], redactions)
            verdict.text, verdict.end = prefix + text[end:], len(prefix)
        return verdict

    async def check(self, text: str, side: Side, *, tenant: str, model: str) -> Verdict:
        """The local checks, then the webhook when it applies to ``side``."""
        verdict = self.scan(text, side)
        if verdict.blocked_by is not None or self.webhook is None or side not in self.webhook_sides:
            return verdict
        answer = await self.webhook.ask(side, verdict.text, tenant=tenant, model=model)
        if answer.action == "block":
            verdict.blocked_by, verdict.reason = "webhook", answer.reason
            verdict.actions.append(("webhook", "block"))
        elif answer.action == "redact" and answer.text is not None and answer.text != verdict.text:
            verdict.text = answer.text
            verdict.actions.append(("webhook", "redact"))
        return verdict


def _settle(end: int, findings: list[Finding]) -> int:
    """``end`` moved back until no finding crosses it."""
    moved = True
    while moved:
        moved = False
        for finding in findings:
            if finding.start < end < finding.end:
                end, moved = finding.start, True
    return end


class Guardrails:
    """The guardrail sets of the policy in force, compiled when a request first needs them."""

    def __init__(self, client: UpstreamClient | None = None) -> None:
        self.client = client
        self._configs: Mapping[str, GuardrailSet] | None = None
        self._sets: dict[str, GuardSet] = {}

    def sets(self, configs: Mapping[str, GuardrailSet], names: Sequence[str]) -> tuple[GuardSet, ...]:
        """The compiled sets named (unknown names are skipped: the policy loader refuses them)."""
        if configs is not self._configs:  # a new policy: compile afresh
            self._configs, self._sets = configs, {}
        compiled: list[GuardSet] = []
        for name in names:
            guard = self._sets.get(name)
            if guard is None:
                config = configs.get(name)
                if config is None:
                    continue
                guard = self._sets[name] = GuardSet(name, config, self.client)
            compiled.append(guard)
        return tuple(compiled)


__all__ = ["GuardSet", "Guardrails", "Verdict"]
