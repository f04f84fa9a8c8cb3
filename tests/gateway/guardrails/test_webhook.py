"""The external guardrail service: its verdicts, and what a failure means under each ``on_error``."""

from __future__ import annotations

from gateway.guardrails.config import WebhookCheck
from gateway.guardrails.webhook import Webhook, WebhookVerdict
from gateway.replicas.http1 import Http1UpstreamClient
from tests.gateway.guardrails.conftest import FakeGuardService


async def ask(service: FakeGuardService, text: str, **check: object) -> WebhookVerdict:
    client = Http1UpstreamClient()
    try:
        webhook = Webhook(WebhookCheck(url=service.url, **check), client)  # type: ignore[arg-type]
        return await webhook.ask("input", text, tenant="acme", model="small")
    finally:
        await client.close()


async def test_the_contract(guard_service: FakeGuardService) -> None:
    assert await ask(guard_service, "hello") == WebhookVerdict("allow")
    assert await ask(guard_service, "a forbidden thing") == WebhookVerdict("block", reason="policy 7")
    assert await ask(guard_service, "hi Alice") == WebhookVerdict("redact", text="hi [NAME]")
    assert guard_service.requests[0] == {
        "stage": "input",
        "text": "hello",
        "tenant": "acme",
        "model": "small",
    }


async def test_a_timeout_fails_open_or_closed(guard_service: FakeGuardService) -> None:
    verdict = await ask(guard_service, "slow", timeout_s=0.2, on_error="fail_open")
    assert verdict.action == "allow"
    verdict = await ask(guard_service, "slow", timeout_s=0.2, on_error="fail_closed")
    assert verdict.action == "block" and verdict.reason == "the guardrail service did not answer"


async def test_a_redaction_without_its_text_is_a_failure(guard_service: FakeGuardService) -> None:
    """The service asked to redact and sent nothing to redact with: a malformed answer, which on_error
    decides, not an allow (under fail_closed it let the text through)."""
    assert (await ask(guard_service, "hi Bob", on_error="fail_closed")).action == "block"
    assert (await ask(guard_service, "hi Bob")).action == "allow"


async def test_an_error_status_or_no_server_is_a_failure(guard_service: FakeGuardService) -> None:
    assert (await ask(guard_service, "broken", on_error="fail_closed")).action == "block"
    assert (await ask(guard_service, "broken")).action == "allow"
    gone = FakeGuardService()
    gone.url = "http://127.0.0.1:9/check"  # nothing listens on the discard port
    assert (await ask(gone, "hello", on_error="fail_closed")).action == "block"
