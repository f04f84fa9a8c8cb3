"""`python -m tools.tiers.evaluate`: the evaluation set, the shares it reports, the command."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt
import pytest

from gateway.tiers import ClassifyInput, TierDecision, build_classifier
from tools.tiers.evaluate import KNOBS, RULES_BASELINE, EvalPrompt, load_eval_set, main, score


def test_eval_set_is_mt_bench_labelled_by_hand() -> None:
    prompts = load_eval_set()
    assert len(prompts) == 80
    assert Counter(p.kind for p in prompts) == {
        k: 10
        for k in ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
    }
    assert {p.tier for p in prompts} == {"small", "medium", "large"}
    grammar = next(p for p in prompts if p.text.startswith("Edit the following paragraph"))
    assert grammar.tier == "small"  # the guide: grammar fixes are small


class _Fixed:
    def __init__(self, pools: dict[str, str]) -> None:
        self.pools = pools

    def classify(self, request: ClassifyInput) -> TierDecision:
        return TierDecision(pool=self.pools[request.messages[0]["content"]], reason="fixed")


def test_cost_wasted_and_quality_lost() -> None:
    prompts = [
        EvalPrompt("1", "a", "s1", "small"),
        EvalPrompt("2", "a", "s2", "small"),
        EvalPrompt("3", "b", "l1", "large"),
        EvalPrompt("4", "b", "m1", "medium"),
    ]
    routed = {"s1": "large", "s2": "small", "l1": "small", "m1": "medium"}
    s = score("fixed", _Fixed(routed), prompts)
    assert (s.accuracy, s.cost_wasted, s.quality_lost) == (0.5, 0.5, 1.0)
    assert s.confusion["a"] == [[1, 0, 1], [0, 0, 0], [0, 0, 0]]
    assert s.confusion["all"][2] == [1, 0, 0]


def test_the_rules_baseline_is_a_valid_policy() -> None:
    decision = build_classifier(RULES_BASELINE, pools=["small", "medium", "large"]).classify(
        ClassifyInput(messages=[{"role": "user", "content": "Prove that 2 is prime."}])
    )
    assert decision.pool == "large"


def _random_minilm(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """384-d unit vectors, one a text, without torch: the command's wiring, not MiniLM's quality."""
    v = np.random.default_rng(0).normal(size=(len(texts), 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_command_scores_four_classifiers_and_the_curve(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json"], embed=_random_minilm) == 0
    report = msgspec.json.decode(capsys.readouterr().out)
    scores = report["scores"]
    assert [s["name"] for s in scores] == ["learned", "embeddings", "rules baseline", "always medium"]
    learned, _embeddings, rules, medium = scores
    assert medium["accuracy"] == pytest.approx(48 / 80)
    # The shipped model beats both baselines and never sends a large-labelled prompt to small.
    assert learned["accuracy"] > max(rules["accuracy"], medium["accuracy"])
    assert learned["quality_lost"] <= 0.1 and learned["cost_wasted"] <= 0.25
    for name in ("learned", "embeddings"):
        points = [c for c in report["curve"] if c["name"] == name]
        assert [c["cost_quality"] for c in points] == pytest.approx(KNOBS)
        assert all(sum(c["shares"].values()) == pytest.approx(1.0) for c in points)
        large = [c["shares"]["large"] for c in points]
        assert large == sorted(large)  # the knob only moves traffic up
    assert main([], embed=_random_minilm) == 0
    out = capsys.readouterr().out
    assert "Confusion per kind" in out and "Cost/quality curve" in out and "Routed to large" in out
