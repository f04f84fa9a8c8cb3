"""Policy config for the tier classifier: one tagged union, ``kind: rules | learned | examples | embeddings``.

In a policy YAML (decoded with ``msgspec.convert(data, ClassifierConfig)``)::

    classifier:
      kind: learned            # or rules / examples / embeddings
      cost_quality: 0.5        # 0 = cheapest pools, 1 = best quality
      sticky_conversations: true

Tiers are the classifier's labels (``small``, ``medium``, ``large`` for the shipped model and by
convention); ``tier_pools`` maps a tier to a pool name when they differ. Every config field has a
default, so ``{"kind": "learned"}`` is a whole policy.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = [
    "DEFAULT_TIERS",
    "ClassifierConfig",
    "EmbeddingsConfig",
    "ExamplesConfig",
    "LearnedConfig",
    "Rule",
    "RulesConfig",
]

DEFAULT_TIERS: tuple[str, ...] = ("small", "medium", "large")
"""Tier labels from cheapest to most capable, as the shipped model and examples use them."""

Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class _Base(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="kind"):
    """Fields every classifier kind shares."""

    tier_pools: dict[str, str] = {}
    """Tier label -> pool name, for tiers whose pool is not named like the tier."""
    fallback_pool: str | None = None
    """Pool used when the classifier cannot decide (no text, nothing similar enough, no rule
    matched); ``None`` means the cheapest tier's pool."""
    sticky_conversations: bool = True
    """Keep a conversation on the tier of its first turn (the gateway stores it under
    :func:`gateway.tiers.conversation_key`); ``False`` classifies every turn afresh."""


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One rule: every condition given must hold (AND); list conditions match if any item does."""

    pool: str
    """Pool (or tier label mapped through ``tier_pools``) chosen when the rule matches."""
    name: str | None = None
    """Short label shown in the route reason; defaults to a description of the conditions."""
    min_prompt_tokens: int | None = None
    """Matches when the whole prompt has at least this many tokens."""
    max_prompt_tokens: int | None = None
    """Matches when the whole prompt has at most this many tokens."""
    keywords: list[str] = []
    """Case-insensitive whole words or phrases searched in the last user message (in scripts without spaces
    between words, such as Chinese, Japanese, Thai, and in Korean, also inside a run of letters)."""
    regex: list[str] = []
    """Python regular expressions (case-insensitive) searched in the last user message."""
    min_turns: int | None = None
    """Matches when the conversation has at least this many user messages."""
    tools: bool | None = None
    """Matches on whether the request declares tools."""
    json_mode: bool | None = None
    """Matches on whether ``response_format`` asks for JSON."""


class RulesConfig(_Base, frozen=True, tag="rules"):
    """Ordered rules; the first that matches picks the pool, else ``fallback_pool``."""

    rules: list[Rule] = []
    """Evaluated top to bottom; first match wins."""


class LearnedConfig(_Base, frozen=True, tag="learned"):
    """The trained hashed-n-gram classifier (``sortyard router train``)."""

    path: str | None = None
    """Model file; ``None`` means the shipped default (``gateway/tiers/data/router.bin``)."""
    cost_quality: Fraction = 0.5
    """The cost/quality knob, like RouteLLM's threshold: a request goes to a tier when the
    calibrated probability that it needs that tier *or a larger one* is at least
    ``1 - cost_quality``. 0 keeps everything on the cheapest tier, 1 sends everything to the largest."""
    thresholds: dict[str, Fraction] = {}
    """Per-tier override of ``1 - cost_quality``: ``{"large": 0.7}`` routes to large only when
    p(large) >= 0.7. Keys are tier labels other than the cheapest."""


class ExamplesConfig(_Base, frozen=True, tag="examples"):
    """Nearest examples: platform teams list example prompts per tier; no training needed."""

    examples: dict[str, list[str]]
    """Tier label (or pool) -> example prompts, listed from the cheapest tier to the largest."""
    min_similarity: Fraction = 0.2
    """Below this cosine similarity to every example, ``fallback_pool`` is used."""
    k: Annotated[int, msgspec.Meta(ge=1)] = 5
    """How many nearest examples vote (weighted by similarity)."""


FallbackConfig = RulesConfig | LearnedConfig | ExamplesConfig
"""A classifier that needs no network call: what ``kind: embeddings`` falls back to."""


class EmbeddingsConfig(_Base, frozen=True, tag="embeddings"):
    """Nearest labelled examples in sentence-embedding space (all-MiniLM-L6-v2), like semantic
    routers: the prompt is embedded by a pool of the policy, the gateway itself never loads a model."""

    pool: str = "embed"
    """The pool that embeds the prompt (``/v1/embeddings``); the default policy's MiniLM pool."""
    model: str | None = None
    """The model name sent to that pool; None sends its replica's served model."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0.0)] = 0.5
    """The most the embedding call may take; past it (or on any failure) ``fallback`` decides."""
    path: str | None = None
    """Labelled example vectors (``tools/tiers/embed_examples.py``); ``None`` means the shipped
    ``gateway/tiers/data/tier_vectors.npz``."""
    k: Annotated[int, msgspec.Meta(ge=1)] = 10
    """How many nearest examples vote, each weighted by its cosine similarity."""
    min_similarity: Fraction = 0.0
    """Below this cosine similarity to the nearest example, ``fallback`` decides."""
    cost_quality: Fraction = 0.5
    """The knob of ``kind: learned``: a request goes to a tier when the vote's p(that tier or a
    larger one) is at least ``1 - cost_quality``."""
    thresholds: dict[str, Fraction] = {}
    """Per-tier override of ``1 - cost_quality``, as for ``kind: learned``."""
    fallback: FallbackConfig = msgspec.field(default_factory=LearnedConfig)
    """Decides when no vector comes back in time: by default the shipped learned model."""


ClassifierConfig = RulesConfig | LearnedConfig | ExamplesConfig | EmbeddingsConfig
"""The policy's classifier section, discriminated by ``kind``."""
