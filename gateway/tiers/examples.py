"""The nearest-examples classifier: example prompts per tier in the policy, no training.

Each example is featurised once at load with the same hashed n-grams as the learned model
(:mod:`gateway.tiers.features`); a request is compared to all of them by cosine similarity and
the ``k`` nearest vote, weighted by similarity. Examples are stored as one concatenated sparse
matrix (CSR-like), so a request costs one ``bincount`` and one gather over the examples' non-zeros.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import numpy.typing as npt

from gateway.tiers.classifier import (
    ClassifierLoadError,
    ClassifyInput,
    PoolMap,
    PromptView,
    TierDecision,
    header_safe,
)
from gateway.tiers.config import ExamplesConfig
from gateway.tiers.features import FeatureConfig, Featurizer, SparseFeatures

__all__ = ["ExamplesClassifier"]


class ExamplesClassifier:
    """k-nearest examples by cosine similarity over hashed n-grams."""

    def __init__(
        self,
        config: ExamplesConfig,
        *,
        pools: Collection[str] | None = None,
        features: FeatureConfig | None = None,
    ) -> None:
        self.config = config
        self.tiers = [t for t, prompts in config.examples.items() if prompts]
        if not self.tiers:
            raise ClassifierLoadError(
                "examples classifier needs at least one example prompt per tier it routes to"
            )
        self._pools = PoolMap(config, self.tiers, pools)
        self.featurizer = Featurizer(features)
        self._num_buckets = self.featurizer.config.num_buckets
        indices: list[npt.NDArray[np.intp]] = []
        values: list[npt.NDArray[np.float64]] = []
        labels: list[int] = []
        for label, tier in enumerate(self.tiers):
            for i, prompt in enumerate(config.examples[tier]):
                if not isinstance(prompt, str) or not prompt.strip():
                    raise ClassifierLoadError(f"examples[{tier!r}][{i}] is empty")
                idx, vals = self._unit_vector(self.featurizer(prompt))
                indices.append(idx)
                values.append(vals)
                labels.append(label)
        self._offsets = np.cumsum([0] + [len(i) for i in indices[:-1]])
        self._indices = np.concatenate(indices)
        self._values = np.concatenate(values)
        self._labels = np.asarray(labels)
        self._k = min(config.k, len(labels))

    def _dense(self, feats: SparseFeatures) -> npt.NDArray[np.float64]:
        dense: npt.NDArray[np.float64] = np.bincount(
            feats.indices, weights=feats.values, minlength=self._num_buckets
        ).astype(np.float64, copy=False)
        return dense

    def _unit_vector(self, feats: SparseFeatures) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        dense = self._dense(feats)
        idx = np.flatnonzero(dense)
        vals = dense[idx]
        return idx, vals / np.linalg.norm(vals)

    def similarities(self, text: str) -> npt.NDArray[np.float64]:
        """Cosine similarity of ``text`` to every example, in load order."""
        query = self._dense(self.featurizer(text))
        # Not np.dot: OpenBLAS threads a 32k-long dot, and on a busy host its spin-waits cost ms.
        norm = float(np.sqrt((query * query).sum()))
        if norm == 0.0:
            return np.zeros(len(self._labels))
        return np.add.reduceat(query[self._indices] * self._values, self._offsets) / norm

    def classify(self, request: ClassifyInput) -> TierDecision:
        view = PromptView.of(request)
        if not view.text.strip():
            return TierDecision(pool=self._pools.fallback, reason="examples empty-prompt fallback")
        sims = self.similarities(view.text)
        nearest = np.argpartition(-sims, self._k - 1)[: self._k]
        best = float(sims[nearest].max())
        if best < self.config.min_similarity:
            return TierDecision(
                pool=self._pools.fallback, reason=f"examples sim={best:.2f} below-min fallback"
            )
        votes = np.bincount(
            self._labels[nearest], weights=np.maximum(sims[nearest], 0.0), minlength=len(self.tiers)
        )
        probs = votes / votes.sum() if votes.sum() > 0 else np.full(len(self.tiers), 1.0 / len(self.tiers))
        chosen = int(np.argmax(probs))
        tier = self.tiers[chosen]
        return TierDecision(
            pool=self._pools.pool(tier),
            reason=header_safe(f"examples p({tier})={probs[chosen]:.2f} sim={best:.2f}"),
            probabilities=self._pools.probabilities(dict(zip(self.tiers, probs.tolist(), strict=True))),
        )
