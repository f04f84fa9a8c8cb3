"""The embeddings classifier: nearest labelled examples in all-MiniLM-L6-v2 space, as semantic routers do.

The gateway never loads the model: the request's text (:class:`PromptView`, cut by
:func:`embedding_text`) is embedded by a pool of the policy, through an ``embed`` function the
route stage passes in (``gateway.semantic_cache.QueryEmbedder``: the gateway's own upstream client
and balancer). Hence two steps, so the scorer stays synchronous and testable on plain vectors::

    decision = await classifier.classify_async(request, embed)   # the stage
    decision = classifier.decide(request, vector)                # pure numpy

The ``k`` nearest examples by cosine similarity vote, each weighted by its similarity; the vote's
shares are the tier probabilities, and the knob of ``kind: learned`` picks the tier (the largest
tier whose p(tier or larger) clears ``1 - cost_quality``). No vector in ``timeout_s`` (a failure, a
timeout, no embedding pool, a vector of the wrong size) or nothing similar enough: the ``fallback``
classifier decides, and the route reason says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection

import numpy as np
import numpy.typing as npt

from gateway.tiers.classifier import (
    Classifier,
    ClassifierLoadError,
    ClassifyInput,
    PoolMap,
    PromptView,
    TierDecision,
    header_safe,
)
from gateway.tiers.config import EmbeddingsConfig
from gateway.tiers.example_vectors import ExampleVectors, embedding_text, read_vectors

__all__ = ["Embed", "EmbeddingsClassifier", "nearest_vote", "pick_tier"]

Embed = Callable[[str], Awaitable[npt.NDArray[np.float32] | None]]
"""Text -> its embedding, or None when the embedding pool gave none (it never raises for that)."""


def nearest_vote(
    examples: ExampleVectors, vector: npt.NDArray[np.float32], k: int
) -> tuple[npt.NDArray[np.float64], float]:
    """Tier probabilities from the ``k`` nearest examples (similarity-weighted) and the best similarity."""
    norm = float(np.sqrt(np.einsum("i,i->", vector, vector)))
    if norm == 0.0:
        return np.full(len(examples.tiers), 1.0 / len(examples.tiers)), 0.0
    # einsum's own loop, not BLAS: OpenBLAS would thread this gemv and spin-wait on a busy host.
    sims = np.einsum("ij,j->i", examples.vectors, vector / norm)
    k = min(k, len(sims))
    nearest = np.argpartition(-sims, k - 1)[:k]
    weights = np.maximum(sims[nearest], 0.0).astype(np.float64)
    votes = np.bincount(examples.labels[nearest], weights=weights, minlength=len(examples.tiers))
    total = votes.sum()
    probs = votes / total if total > 0 else np.full(len(examples.tiers), 1.0 / len(examples.tiers))
    return probs, float(sims[nearest].max())


def pick_tier(probs: npt.NDArray[np.float64], thresholds: list[tuple[int, float]]) -> int:
    """The largest tier whose p(tier or larger) clears its threshold (``thresholds`` largest first)."""
    at_least = np.cumsum(probs[::-1])[::-1]  # at_least[i] = p(tier i or larger)
    for i, threshold in thresholds:
        if at_least[i] >= threshold and at_least[i] > 0.0:
            return i
    return 0


class EmbeddingsClassifier:
    """k nearest labelled examples in embedding space, with the learned kind's cost/quality knob."""

    def __init__(
        self,
        config: EmbeddingsConfig,
        examples: ExampleVectors,
        fallback: Classifier,
        *,
        pools: Collection[str] | None = None,
    ) -> None:
        self.config = config
        self.examples = examples
        self.fallback = fallback
        tiers = examples.tiers
        self._pools = PoolMap(config, tiers, pools)
        if pools is not None and config.pool not in pools:
            raise ClassifierLoadError(
                f"classifier embeds prompts through pool {config.pool!r}, which does not exist; known "
                f"pools: {sorted(pools)}. Add an embeddings pool or name one with `pool`."
            )
        unknown = set(config.thresholds) - set(tiers[1:])
        if unknown:
            raise ClassifierLoadError(
                f"thresholds name {sorted(unknown)}, which are not tiers above the cheapest of the "
                f"example vectors ({list(tiers[1:])})"
            )
        # cost_quality 0 must never leave the cheapest tier, even when a share rounds to 1.0.
        default = 1.0 - config.cost_quality if config.cost_quality > 0 else float("inf")
        self._thresholds = [
            (i, config.thresholds.get(tier, default)) for i, tier in reversed(list(enumerate(tiers))) if i > 0
        ]

    @classmethod
    def load(
        cls, config: EmbeddingsConfig, fallback: Classifier, *, pools: Collection[str] | None = None
    ) -> EmbeddingsClassifier:
        return cls(config, read_vectors(config.path), fallback, pools=pools)

    def _fall_back(self, request: ClassifyInput, why: str) -> TierDecision:
        decision = self.fallback.classify(request)
        return TierDecision(
            pool=decision.pool,
            reason=header_safe(f"embeddings {why}; {decision.reason}"),
            probabilities=decision.probabilities,
        )

    def classify(self, request: ClassifyInput) -> TierDecision:
        """Without an embedding (a caller that has no embedding pool): the fallback decides."""
        return self._fall_back(request, "no embedder")

    async def classify_async(self, request: ClassifyInput, embed: Embed | None) -> TierDecision:
        """Embed the request's text through ``embed`` (at most ``timeout_s``), then :meth:`decide`."""
        view = PromptView.of(request)
        if not view.text.strip():
            return TierDecision(pool=self._pools.fallback, reason="embeddings empty-prompt fallback")
        if embed is None:
            return self._fall_back(request, "no embedder")
        try:
            async with asyncio.timeout(self.config.timeout_s):
                vector = await embed(embedding_text(view.text))
        except TimeoutError:
            return self._fall_back(request, "timeout")
        if vector is None:
            return self._fall_back(request, "unavailable")
        return self.decide(request, vector)

    def decide(self, request: ClassifyInput, vector: npt.NDArray[np.float32]) -> TierDecision:
        """The decision for a request whose text embeds to ``vector``."""
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vector.shape[0] != self.examples.dim or not np.isfinite(vector).all():
            return self._fall_back(request, f"bad vector (dim {vector.shape[0]}, want {self.examples.dim})")
        probs, best = nearest_vote(self.examples, vector, self.config.k)
        if best < self.config.min_similarity:
            return self._fall_back(request, f"sim={best:.2f} below-min")
        tiers = self.examples.tiers
        chosen = pick_tier(probs, self._thresholds)
        return TierDecision(
            pool=self._pools.pool(tiers[chosen]),
            reason=header_safe(f"embeddings p({tiers[chosen]})={float(probs[chosen]):.2f} sim={best:.2f}"),
            probabilities=self._pools.probabilities(dict(zip(tiers, probs.tolist(), strict=True))),
        )
