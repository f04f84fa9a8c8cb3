"""``build_classifier``: the classifier a policy's ``classifier:`` section asks for."""

from __future__ import annotations

from collections.abc import Collection

from gateway.tiers.classifier import Classifier, ClassifierLoadError
from gateway.tiers.config import (
    ClassifierConfig,
    EmbeddingsConfig,
    ExamplesConfig,
    LearnedConfig,
    RulesConfig,
)
from gateway.tiers.embeddings import EmbeddingsClassifier
from gateway.tiers.examples import ExamplesClassifier
from gateway.tiers.learned import LearnedClassifier
from gateway.tiers.rules import RulesClassifier

__all__ = ["build_classifier"]


def build_classifier(config: ClassifierConfig, *, pools: Collection[str] | None = None) -> Classifier:
    """Build the classifier a policy asks for; ``pools`` (the gateway's pool names) is checked
    against every pool the classifier may choose. ``None`` skips that check (``route explain``)."""
    if isinstance(config, RulesConfig):
        return RulesClassifier(config, pools=pools)
    if isinstance(config, LearnedConfig):
        return LearnedClassifier.load(config, pools=pools)
    if isinstance(config, ExamplesConfig):
        return ExamplesClassifier(config, pools=pools)
    if isinstance(config, EmbeddingsConfig):  # the fallback decides when no embedding comes in time
        return EmbeddingsClassifier.load(config, build_classifier(config.fallback, pools=pools), pools=pools)
    raise ClassifierLoadError(f"unknown classifier config {type(config).__name__}")
