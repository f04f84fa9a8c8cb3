"""Tier routing for ``model: "auto"``: pick the small / medium / large pool for a request.

The gateway's whole contact with this package::

    classifier = build_classifier(policy.classifier, pools=policy.pool_names)  # at policy load
    decision = classifier.classify(ClassifyInput(messages=..., tools=..., json_mode=...))
    # decision.pool, decision.reason -> x-sortyard-pool, x-sortyard-route-reason

and :func:`conversation_key` for sticky conversations. ``kind: embeddings`` needs the prompt's
vector from a pool first: the route stage awaits ``EmbeddingsClassifier.classify_async`` instead.
Training (torch) lives in ``gateway.cli.train`` and is never imported from here.
"""

from gateway.tiers.classifier import (
    Classifier,
    ClassifierLoadError,
    ClassifyInput,
    TierDecision,
    conversation_key,
)
from gateway.tiers.config import (
    ClassifierConfig,
    EmbeddingsConfig,
    ExamplesConfig,
    LearnedConfig,
    Rule,
    RulesConfig,
)
from gateway.tiers.factory import build_classifier

__all__ = [
    "Classifier",
    "ClassifierConfig",
    "ClassifierLoadError",
    "ClassifyInput",
    "EmbeddingsConfig",
    "ExamplesConfig",
    "LearnedConfig",
    "Rule",
    "RulesConfig",
    "TierDecision",
    "build_classifier",
    "conversation_key",
]
