"""Labels follow the guide: the request decides first, the source's category otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.tiers.labels import MMLU_TIERS, label, label_with_basis
from tools.tiers.sources import Prompt, read_source


def _p(source: str, kind: str, text: str) -> Prompt:
    return Prompt(source, "x", kind, text)


@pytest.mark.parametrize(
    ("prompt", "tier", "basis"),
    [
        (_p("ifeval", "x", "Rewrite the sentence in a formal tone: hey, got it."), "small", "request"),
        (_p("healthbench", "x", "check grammar: pt have fever since 2 days"), "small", "request"),
        (_p("ifbench", "x", "Prove that the product of two odd numbers is odd."), "large", "request"),
        (_p("ifeval", "instructions", "Write a 300+ word essay on tea."), "medium", "source"),
        (_p("arena-hard", "math", "Find the area under y = x^2 from 0 to 3."), "large", "source"),
        (_p("arena-hard", "creative_writing", "Write a poem about my grandmother."), "medium", "source"),
        (_p("arena-hard", "coding", "How do I center a div with CSS?"), "medium", "source"),
        (_p("arena-hard", "coding", "Design a lock-free queue in C++."), "large", "source"),
        (_p("healthbench", "x", "Best exercises for staying fit after 60"), "medium", "source"),
        (_p("gsm8k", "word problem", "Rewrite nothing; Bo has 3 apples..."), "large", "source"),
        (_p("hellaswag", "x", "Which ending fits best?"), "small", "source"),
        (_p("truthfulqa", "fact", "What happens if you crack your knuckles a lot?"), "medium", "source"),
        (_p("mmlu", "global facts", "What share of the world lives in cities?"), "small", "source"),
        (_p("mmlu", "professional law", "A man sues his neighbour..."), "medium", "source"),
        (_p("mmlu", "college mathematics", "Let f be continuous on [0, 1]..."), "large", "source"),
        (_p("mmlu", "elementary mathematics", "What is the value of p in 24 = 2p?"), "small", "source"),
    ],
)
def test_label(prompt: Prompt, tier: str, basis: str) -> None:
    assert label_with_basis(prompt) == (tier, basis)
    assert label(prompt) == tier


def test_every_mmlu_subject_has_a_tier() -> None:
    subjects = {p.kind for p in read_source("mmlu")}
    assert subjects - set(MMLU_TIERS) == {"elementary mathematics"}  # split by length instead


def test_rules_agree_with_the_hand_labelled_sample() -> None:
    """label_audit.jsonl: 60 training prompts drawn at random (seed 20261201) and labelled by hand
    with the guide. The rules must keep agreeing with at least 85% of them (90% when written)."""
    import json

    path = Path(__file__).resolve().parents[3] / "tools" / "tiers" / "label_audit.jsonl"
    audit = [json.loads(line) for line in path.read_text().splitlines()]
    wanted = {(a["source"], a["id"]): a["tier"] for a in audit}
    prompts = {(p.source, p.id): p for source in {a["source"] for a in audit} for p in read_source(source)}
    assert set(wanted) <= set(prompts)
    agree = sum(label(prompts[key]) == tier for key, tier in wanted.items())
    assert len(wanted) == 60 and agree / len(wanted) >= 0.85
