"""The policy's ``guardrails:`` section: named sets of checks, applied by pools and keys by name.

Each check says what it finds, what happens then (``redact``: the span becomes ``[REDACTED:KIND]``;
``block``: the request is refused, or the stream ended) and on which side it runs (``input``: the
prompt, before the upstream and the cache; ``output``: the answer, plain or streamed).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

Action = Literal["redact", "block"]
Side = Literal["input", "output"]
PiiKind = Literal["email", "phone", "card", "iban", "national_id"]
SecretKind = Literal["openai_key", "aws_key", "github_token", "slack_token", "jwt", "bearer"]

ALL_PII: tuple[PiiKind, ...] = ("email", "phone", "card", "iban", "national_id")
ALL_SECRETS: tuple[SecretKind, ...] = (
    "openai_key",
    "aws_key",
    "github_token",
    "slack_token",
    "jwt",
    "bearer",
)
BOTH_SIDES: tuple[Side, ...] = ("input", "output")


class PiiCheck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Personal data found by pattern (and checksum, where the format has one)."""

    detect: tuple[PiiKind, ...] = ALL_PII
    """Which kinds: ``email``, ``phone`` (E.164, North American, UK), ``card`` (Luhn), ``iban``
    (mod 97), ``national_id`` (US SSN, UK NINO)."""
    action: Action = "redact"
    stages: tuple[Side, ...] = BOTH_SIDES


class SecretsCheck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """API keys and tokens found by their well-known prefixes."""

    detect: tuple[SecretKind, ...] = ALL_SECRETS
    """Which kinds: ``openai_key`` (``sk-``), ``aws_key`` (``AKIA``), ``github_token`` (``ghp_``,
    ``github_pat_``, ...), ``slack_token`` (``xoxb-``/``xoxp-``), ``jwt``, ``bearer`` (``Bearer ...``)."""
    action: Action = "redact"
    stages: tuple[Side, ...] = BOTH_SIDES


class BlockListCheck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Words or phrases, matched whole-word and case-insensitively."""

    words: tuple[Annotated[str, msgspec.Meta(min_length=1, max_length=200)], ...]
    action: Action = "block"
    stages: tuple[Side, ...] = BOTH_SIDES


class WebhookCheck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An external guardrail service: the gateway POSTs ``{"stage", "text", "tenant", "model"}`` and
    reads ``{"action": "allow" | "block" | "redact", "text"?, "reason"?}``."""

    url: str
    """Where to POST (http or https)."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=30)] = 0.5
    """The whole exchange; past it the check has failed (``on_error`` decides)."""
    on_error: Literal["fail_open", "fail_closed"] = "fail_open"
    """A service that is down, slow or answers nonsense: let the text through, or block it."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    """Sent with each call (an ``authorization`` for the service, say)."""
    stages: tuple[Side, ...] = ("input",)
    """Input only by default. On output only plain answers are sent: a stream is never held back for
    a round trip."""


class GuardrailSet(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One named set of checks (``guardrails: {strict: {pii: {...}, secrets: {...}}}``)."""

    pii: PiiCheck | None = None
    secrets: SecretsCheck | None = None
    block_list: BlockListCheck | None = None
    webhook: WebhookCheck | None = None


__all__ = [
    "ALL_PII",
    "ALL_SECRETS",
    "Action",
    "BlockListCheck",
    "GuardrailSet",
    "PiiCheck",
    "PiiKind",
    "SecretKind",
    "SecretsCheck",
    "Side",
    "WebhookCheck",
]
