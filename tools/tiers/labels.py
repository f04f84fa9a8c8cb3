"""Tier labels for real prompts, by the labelling guide in docs/routing.md.

A prompt's tier is the smallest pool that should answer it well. No source carries that label, so
it is derived here, in this order:

1. What the user asks for, when the guide names it outright (:func:`gateway.tiers.cues.request_cue`,
   read from the first and last few hundred characters, where instructions sit): greetings,
   grammar fixes, rewording, short translation, extraction, labels, titles, unit conversion and
   simple arithmetic are ``small`` unless a long piece of writing is asked for; proofs,
   derivations, system design and threat models are ``large``.
2. Otherwise what the source's own category says: competition maths, word problems and
   arena-hard's maths are ``large``; HumanEval functions, instruction-following writing and
   health questions are ``medium``; MMLU goes by subject (recall subjects ``small``, reading and
   professional judgement ``medium``, calculation subjects ``large``).

The rules are few and written from the guide; a hand-labelled random sample
(``label_audit.jsonl``) measures how often they agree with a person (docs/routing.md gives the
figure, and says which choices were made while the evaluation report was being read).
"""

from __future__ import annotations

import re

from gateway.tiers.cues import instruction, request_cue
from tools.tiers.sources import Prompt

__all__ = ["MMLU_TIERS", "label", "label_with_basis"]

MMLU_TIERS: dict[str, str] = {
    **dict.fromkeys(
        (
            "anatomy",
            "astronomy",
            "business ethics",
            "computer security",
            "conceptual physics",
            "global facts",
            "high school biology",
            "high school geography",
            "high school government and politics",
            "high school psychology",
            "human aging",
            "human sexuality",
            "management",
            "marketing",
            "medical genetics",
            "miscellaneous",
            "nutrition",
            "prehistory",
            "public relations",
            "sociology",
            "us foreign policy",
            "virology",
            "world religions",
        ),
        "small",
    ),
    **dict.fromkeys(
        (
            "clinical knowledge",
            "college biology",
            "college medicine",
            "electrical engineering",
            "high school computer science",
            "high school european history",
            "high school macroeconomics",
            "high school microeconomics",
            "high school us history",
            "high school world history",
            "international law",
            "jurisprudence",
            "logical fallacies",
            "moral disputes",
            "moral scenarios",
            "philosophy",
            "professional law",
            "professional medicine",
            "professional psychology",
            "security studies",
        ),
        "medium",
    ),
    **dict.fromkeys(
        (
            "abstract algebra",
            "college chemistry",
            "college computer science",
            "college mathematics",
            "college physics",
            "econometrics",
            "formal logic",
            "high school chemistry",
            "high school mathematics",
            "high school physics",
            "high school statistics",
            "machine learning",
            "professional accounting",
        ),
        "large",
    ),
}
"""MMLU subject -> tier: recall (small), reading and professional judgement (medium), calculation and
formal reasoning (large). ``elementary mathematics`` is split by length (see :func:`label`)."""

# Coding prompts that ask for design, algorithms or systems work rather than ordinary code.
_HARD_CODE = re.compile(
    r"\b(architect\w*|scalab\w*|distributed|concurren\w*|thread-safe|lock-free|multithread\w*|"
    r"optimi[sz]\w*|complexity|algorithm\w*|compiler|interpreter|from scratch|engine|simulat\w*|"
    r"kernel|cryptograph\w*|reverse[- ]engineer\w*|race condition|deadlock|design)\b|O\([^)]{1,12}\)",
    re.IGNORECASE,
)
# Sources whose every item is one kind of task: the category is the whole story.
_UNIFORM_SOURCES = frozenset(("champ", "gsm8k", "humaneval", "truthfulqa", "hellaswag", "ds4"))
_SOFT_DS4_DOMAINS = {"Sociology", "Law", "Literature and Arts", "Military Science", "Medicine", "Agronomy"}


def _by_request(text: str) -> str | None:
    """The tier the request itself implies, or None when it does not say."""
    cue = request_cue(text)
    return {"large_task": "large", "small_task": "small"}.get(cue) if cue else None


def _by_source(prompt: Prompt) -> str:
    """The tier the source's own category implies."""
    source, kind, text = prompt.source, prompt.kind, prompt.text
    if source in ("champ", "gsm8k"):
        return "large"  # competition maths; multi-step word problems
    if source == "truthfulqa":
        return "medium"  # short, but built to draw out misconceptions that small models repeat
    if source == "hellaswag":
        return "small"  # commonsense sentence endings
    if source == "humaneval":
        return "medium"  # one ordinary function
    if source == "ds4":
        domain = kind.split(":", 1)[-1]
        return "medium" if kind.startswith("choice:") and domain in _SOFT_DS4_DOMAINS else "large"
    if source == "mmlu":
        if kind == "elementary mathematics":
            return "small" if len(text) < 200 else "large"  # simple arithmetic vs word problems
        return MMLU_TIERS.get(kind, "medium")
    if source == "arena-hard":
        if kind == "math":
            return "large"
        if kind == "coding":
            return "large" if len(text) > 3000 or _HARD_CODE.search(instruction(text)) else "medium"
        return "medium"  # creative writing and role-play
    if source == "healthbench":
        return "large" if len(text) > 2000 else "medium"  # long clinical cases need judgement
    return "medium"  # instruction following (ifeval, ifbench) and anything else


def label_with_basis(prompt: Prompt) -> tuple[str, str]:
    """The tier of one prompt and what decided it: ``"request"`` (what the user asks for) or
    ``"source"`` (the source's category)."""
    if prompt.source not in _UNIFORM_SOURCES:
        tier = _by_request(prompt.text)
        if tier is not None:
            return tier, "request"
    return _by_source(prompt), "source"


def label(prompt: Prompt) -> str:
    """The tier of one prompt: what the request asks for first, else its source's category."""
    return label_with_basis(prompt)[0]
