"""The tier classifier's API: what goes in, what comes out, and how a policy builds one.

The gateway calls ``build_classifier(config, pools=...)`` (``gateway.tiers.factory``) once per
policy load (errors surface as :class:`ClassifierLoadError`, so a bad policy is refused and the last
good one keeps serving) and
``classifier.classify(ClassifyInput(...))`` once per ``model: "auto"`` request. ``classify``
never raises on odd input (no messages, content parts, empty text): it falls back instead.

Conversations keep their tier across turns when ``sticky_conversations`` is set: the gateway
stores the first decision under :func:`conversation_key` in its shared store (Redis) and reuses
it for later turns of the same conversation, so every replica agrees.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from gateway.tiers.config import ClassifierConfig
from gateway.tiers.features import estimate_tokens

__all__ = [
    "MAX_REASON_CHARS",
    "Classifier",
    "ClassifierLoadError",
    "ClassifyInput",
    "PromptView",
    "TierDecision",
    "conversation_key",
    "header_safe",
]

MAX_REASON_CHARS = 120
_UNSAFE = re.compile(r"[^\x20-\x7e]+")


class ClassifierLoadError(ValueError):
    """A policy's classifier cannot be built: missing/corrupt/incompatible model file, bad regex,
    a tier that is not a pool. The message says which and how to fix it."""


class TierDecision(msgspec.Struct, frozen=True):
    """The classifier's answer for one request."""

    pool: str
    """The chosen pool."""
    reason: str
    """Short, header-safe ASCII, e.g. ``learned p(large)=0.81`` or ``rules tokens>=2000``."""
    probabilities: dict[str, float] | None = None
    """Per-pool probabilities when the classifier has them (learned, examples)."""


class ClassifyInput(msgspec.Struct, frozen=True):
    """What the gateway knows about a request when it routes it."""

    messages: list[dict]
    """OpenAI chat messages as decoded JSON (content a string or a list of parts); [] for completions."""
    prompt: str | None = None
    """The prompt of a /v1/completions request."""
    tools: bool = False
    """The request declares tools."""
    json_mode: bool = False
    """``response_format`` asks for JSON."""
    num_prompt_tokens: int | None = None
    """The prompt's token count when the gateway already counted it (else estimated from characters)."""


class Classifier(Protocol):
    """Anything that picks a pool for a request."""

    def classify(self, request: ClassifyInput) -> TierDecision: ...


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


class PromptView(msgspec.Struct, frozen=True):
    """The numbers every classifier reads from a request, computed once."""

    text: str
    """The text to classify: the last user message (or the completions prompt)."""
    num_prompt_tokens: int
    """Tokens of the whole prompt (all messages), counted by the gateway or estimated."""
    num_turns: int
    """User messages in the conversation (1 for completions)."""
    tools: bool
    json_mode: bool

    @classmethod
    def of(cls, request: ClassifyInput) -> PromptView:
        if request.prompt is not None and not request.messages:
            text = request.prompt if isinstance(request.prompt, str) else ""
            num_chars, num_turns = len(text), 1
        else:
            text, num_chars, num_turns = "", 0, 0
            last_any = ""
            for message in request.messages:
                if not isinstance(message, dict):
                    continue
                body = content_text(message.get("content"))
                num_chars += len(body)
                last_any = body
                if message.get("role") == "user":
                    text = body
                    num_turns += 1
            text = text or last_any
        tokens = request.num_prompt_tokens
        return cls(
            text=text,
            num_prompt_tokens=tokens if tokens is not None else estimate_tokens(num_chars),
            num_turns=num_turns,
            tools=request.tools,
            json_mode=request.json_mode,
        )


def conversation_key(messages: Sequence[Any], *, namespace: str = "") -> str | None:
    """A stable key for a conversation: sha256 of the system prompt and the first user message.

    It is the same on every turn of a conversation (later turns only append), so the gateway can
    store the first turn's tier under it (e.g. ``sy:{tenant}:tier:<key>`` with a TTL) and reuse it.
    Pass the tenant or API-key id as ``namespace`` so tenants never share a key. Two
    conversations that open with the same system prompt and first message share a key; they
    would get the same first-turn tier anyway. ``None`` when there is no user message.
    """
    system, first_user = "", None
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer") and first_user is None:
            system += content_text(message.get("content")) + "\n"
        elif role == "user":
            first_user = content_text(message.get("content"))
            break
    if first_user is None:
        return None
    digest = hashlib.sha256()
    for part in (namespace, system, first_user):
        data = part.encode("utf-8", "replace")
        digest.update(len(data).to_bytes(8, "little"))  # length-prefixed: no ambiguity
        digest.update(data)
    return digest.hexdigest()[:32]


def header_safe(text: str) -> str:
    """Printable ASCII only, at most 120 characters: safe as an HTTP header value."""
    return _UNSAFE.sub("?", text)[:MAX_REASON_CHARS]


class PoolMap:
    """Resolves tier labels to pool names and checks them against the gateway's pools."""

    def __init__(
        self,
        config: ClassifierConfig,
        tiers: Sequence[str],
        pools: Collection[str] | None,
    ) -> None:
        self.tiers = tuple(tiers)
        self._pool_of: dict[str, str] = {t: config.tier_pools.get(t, t) for t in self.tiers}
        unknown = set(config.tier_pools) - set(self.tiers)
        if unknown:
            raise ClassifierLoadError(
                f"tier_pools names tiers {sorted(unknown)} that the classifier does not have "
                f"(its tiers: {list(self.tiers)})"
            )
        fallback = config.fallback_pool
        if fallback is None:
            fallback = self._pool_of[self.tiers[0]] if self.tiers else ""
        self.fallback = fallback
        if pools is not None:
            wanted = {**{f"tier {t!r}": p for t, p in self._pool_of.items()}, "fallback_pool": fallback}
            missing = {k: p for k, p in wanted.items() if p not in pools}
            if missing:
                details = ", ".join(f"{k} -> pool {p!r}" for k, p in missing.items())
                raise ClassifierLoadError(
                    f"classifier routes to pools that do not exist: {details}; known pools: "
                    f"{sorted(pools)}. Add the pools or map tiers with tier_pools."
                )

    def pool(self, tier: str) -> str:
        return self._pool_of.get(tier, tier)

    def probabilities(self, probs: Mapping[str, float]) -> dict[str, float]:
        """Tier probabilities re-keyed by pool (tiers sharing a pool add up), rounded for headers."""
        out: dict[str, float] = {}
        for tier, p in probs.items():
            pool = self.pool(tier)
            out[pool] = out.get(pool, 0.0) + float(p)
        return {k: round(v, 4) for k, v in out.items()}
