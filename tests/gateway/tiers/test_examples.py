"""Nearest-examples classifier: picks the tier of similar examples; falls back when nothing is close."""

from __future__ import annotations

import pytest

from gateway.tiers import ClassifierLoadError, ClassifyInput, ExamplesConfig, build_classifier

EXAMPLES = {
    "small": ["hi, how are you?", "translate 'good morning' into French", "fix the spelling of this word"],
    "medium": [
        "summarize this article in three bullet points",
        "write a python function to parse a csv file",
    ],
    "large": [
        "prove that there are infinitely many primes",
        "design a distributed database for global scale",
    ],
}


def user(text: str) -> ClassifyInput:
    return ClassifyInput(messages=[{"role": "user", "content": text}])


@pytest.mark.parametrize(
    ("text", "pool"),
    [
        ("hi there, how are you doing?", "small"),
        ("please translate 'good night' into French", "small"),
        ("write a python function to parse a json file", "medium"),
        ("prove that there are infinitely many twin primes", "large"),
        ("design a distributed cache for global scale", "large"),
    ],
)
def test_nearest_examples(text: str, pool: str) -> None:
    classifier = build_classifier(ExamplesConfig(examples=EXAMPLES, k=3), pools=["small", "medium", "large"])
    decision = classifier.classify(user(text))
    assert decision.pool == pool
    assert decision.reason.startswith(f"examples p({pool})=")
    assert decision.probabilities is not None
    assert sum(decision.probabilities.values()) == pytest.approx(1.0, abs=1e-3)


def test_identical_prompt_has_similarity_one() -> None:
    classifier = build_classifier(ExamplesConfig(examples=EXAMPLES), pools=None)
    sims = classifier.similarities(EXAMPLES["large"][0])  # type: ignore[attr-defined]
    assert sims.max() == pytest.approx(1.0, abs=1e-6)


def test_dissimilar_prompt_falls_back() -> None:
    config = ExamplesConfig(examples=EXAMPLES, min_similarity=0.9, fallback_pool="medium")
    decision = build_classifier(config, pools=None).classify(user("zzqx vvkw"))
    assert decision.pool == "medium"
    assert "fallback" in decision.reason
    empty = build_classifier(config, pools=None).classify(ClassifyInput(messages=[]))
    assert empty.pool == "medium"


def test_bad_examples_are_refused() -> None:
    with pytest.raises(ClassifierLoadError, match="at least one example"):
        build_classifier(ExamplesConfig(examples={}), pools=None)
    with pytest.raises(ClassifierLoadError, match="empty"):
        build_classifier(ExamplesConfig(examples={"small": ["  "]}), pools=None)
    with pytest.raises(ClassifierLoadError, match="do not exist"):
        build_classifier(ExamplesConfig(examples=EXAMPLES), pools=["small"])
