"""A compiled set: local checks, block over redact, the webhook after, compiled once per policy."""

from __future__ import annotations

from gateway.guardrails.config import BlockListCheck, GuardrailSet, PiiCheck, SecretsCheck, WebhookCheck
from gateway.guardrails.guard import Guardrails, GuardSet
from gateway.replicas.http1 import Http1UpstreamClient
from tests.gateway.guardrails.conftest import FakeGuardService

STRICT = GuardrailSet(
    pii=PiiCheck(),
    secrets=SecretsCheck(action="block", stages=("input",)),
    block_list=BlockListCheck(words=("project x",), stages=("output",)),
)


def test_redacts_every_finding() -> None:
    verdict = GuardSet("strict", STRICT, None).scan("mail a@b.io or 555-123-4567", "input")
    assert verdict.text == "mail [REDACTED:EMAIL] or [REDACTED:PHONE]"
    assert verdict.actions == [("email", "redact"), ("phone", "redact")] and verdict.blocked_by is None


def test_a_block_wins_and_the_sides_apply() -> None:
    guard = GuardSet("strict", STRICT, None)
    verdict = guard.scan("a@b.io key sk-abcdefghijklmnopqrstuvwxyz", "input")
    assert verdict.blocked_by == "openai_key" and verdict.actions == [("openai_key", "block")]
    assert guard.scan("key sk-abcdefghijklmnopqrstuvwxyz", "output").blocked_by is None  # input only
    assert guard.scan("about Project   X", "output").blocked_by == "block_list"
    assert guard.scan("about Project X", "input").blocked_by is None


def test_compiled_once_per_policy() -> None:
    guardrails = Guardrails()
    configs = {"strict": STRICT}
    [first] = guardrails.sets(configs, ("strict", "unknown"))
    [again] = guardrails.sets(configs, ("strict",))
    assert first is again
    [fresh] = guardrails.sets(dict(configs), ("strict",))  # a reload: a new policy's mapping
    assert fresh is not first


async def test_the_webhook_sees_the_redacted_text(guard_service: FakeGuardService) -> None:
    client = Http1UpstreamClient()
    try:
        config = GuardrailSet(pii=PiiCheck(), webhook=WebhookCheck(url=guard_service.url))
        guard = GuardSet("hooked", config, client)
        verdict = await guard.check("Alice a@b.io", "input", tenant="t", model="m")
        assert verdict.text == "[NAME] [REDACTED:EMAIL]"
        assert verdict.actions == [("email", "redact"), ("webhook", "redact")]
        assert guard_service.requests[-1]["text"] == "Alice [REDACTED:EMAIL]"
        verdict = await guard.check("forbidden", "input", tenant="t", model="m")
        assert verdict.blocked_by == "webhook" and verdict.reason == "policy 7"
        verdict = await guard.check("forbidden", "output", tenant="t", model="m")  # input only by default
        assert verdict.blocked_by is None
    finally:
        await client.close()
