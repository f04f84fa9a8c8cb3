"""An external guardrail service, called through the gateway's own upstream client.

The contract: ``POST url`` with ``{"stage": "input" | "output", "text", "tenant", "model"}``; the
answer is ``{"action": "allow" | "block" | "redact", "text"?: ..., "reason"?: ...}`` (``redact``
carries the text to use instead). A service that fails (no connection, a status other than 200, an
answer that is not that shape, or no answer within ``timeout_s``) is ``on_error``'s: ``fail_open``
lets the text through, ``fail_closed`` blocks it.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import msgspec

from gateway.errors import GatewayError
from gateway.guardrails.config import Side, WebhookCheck
from gateway.replicas.client import UpstreamClient
from gateway.replicas.pools import Timeouts


class _Request(msgspec.Struct, frozen=True):
    stage: Side
    text: str
    tenant: str
    model: str


class WebhookVerdict(msgspec.Struct, frozen=True):
    """What the service decided (or what ``on_error`` decided for it)."""

    action: Literal["allow", "block", "redact"]
    text: str | None = None
    reason: str | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WebhookVerdict)


class Webhook:
    """One configured service (``WebhookCheck``) on the gateway's HTTP client."""

    def __init__(self, check: WebhookCheck, client: UpstreamClient) -> None:
        self.check = check
        self.client = client
        self.timeouts = Timeouts(
            connect_s=check.timeout_s,
            first_byte_s=check.timeout_s,
            idle_s=check.timeout_s,
            total_s=check.timeout_s,
        )
        self.headers = {"Content-Type": "application/json", **check.headers}

    async def ask(self, stage: Side, text: str, *, tenant: str, model: str) -> WebhookVerdict:
        body = _encoder.encode(_Request(stage, text, tenant, model))
        try:
            async with asyncio.timeout(self.check.timeout_s):
                verdict = await self._send(body)
        except (GatewayError, TimeoutError, OSError, msgspec.DecodeError) as error:
            if self.check.on_error == "fail_open":
                return WebhookVerdict("allow", reason=f"guardrail service failed: {type(error).__name__}")
            return WebhookVerdict("block", reason="the guardrail service did not answer")
        if verdict.action == "redact" and verdict.text is None:  # nothing to redact with: a malformed answer
            if self.check.on_error == "fail_open":
                return WebhookVerdict("allow", reason="guardrail service asked to redact but sent no text")
            return WebhookVerdict("block", reason="the guardrail service asked to redact but sent no text")
        return verdict

    async def _send(self, body: bytes) -> WebhookVerdict:
        response = await self.client.post(self.check.url, body, self.headers, self.timeouts, "guardrail")
        try:
            payload = await response.read()
        except BaseException:
            response.close()
            raise
        response.release()
        if response.status != 200:
            raise GatewayError(f"guardrail service answered {response.status}")
        return _decoder.decode(payload)


__all__ = ["Webhook", "WebhookVerdict"]
