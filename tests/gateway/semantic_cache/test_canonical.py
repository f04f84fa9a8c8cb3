"""gateway/semantic_cache/canonical.py: what is embedded, what is skipped, and the literal guard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.semantic_cache.canonical import (
    MAX_CONTEXT_CHARS,
    canonical_text,
    is_sampled,
    literals,
    system_prompt,
)


def chat(*messages: tuple[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "small", "messages": [{"role": r, "content": c} for r, c in messages], **fields}


def test_the_last_user_turn_comes_first_and_whole_then_the_context_cut() -> None:
    long_system = "s" * 1000
    body = chat(("system", long_system), ("user", "hi"), ("assistant", "hello"), ("user", "q" * 900))
    text = canonical_text(body)
    assert text is not None
    lines = text.split("\n")
    assert lines[0] == "q" * 900  # whole, and first: the model reads only 256 tokens
    assert lines[1] == "system: " + "s" * MAX_CONTEXT_CHARS
    assert lines[2:] == ["user: hi", "assistant: hello"]


def test_text_parts_are_joined_and_developer_counts_as_system() -> None:
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert canonical_text(chat(("developer", "be brief"), ("user", parts))) == "one\ntwo\nsystem: be brief"
    assert system_prompt(chat(("developer", "be brief"), ("user", "x"))) == "be brief"


@pytest.mark.parametrize(
    "body",
    [
        chat(("user", "x"), tools=[{"type": "function", "function": {"name": "f"}}]),
        chat(("user", "x"), n=2),
        chat(("user", "x"), response_format={"type": "json_schema", "json_schema": {}}),
        chat(("user", [{"type": "image_url", "image_url": {"url": "data:,"}}])),
        chat(("user", "x"), ("assistant", "prefilled")),
        chat(("user", "x"), ("tool", "result")),
        chat(("user", "   ")),
        {"model": "small", "messages": []},
    ],
    ids=["tools", "n", "structured", "image", "prefill", "tool-role", "empty", "no-messages"],
)
def test_requests_it_does_not_answer(body: dict[str, Any]) -> None:
    assert canonical_text(body) is None


def test_sampled_means_temperature_above_zero_or_top_p_below_one() -> None:
    assert is_sampled({})  # OpenAI's default temperature is 1
    assert is_sampled({"temperature": 0.7})
    assert is_sampled({"temperature": 0, "top_p": 0.9})
    assert not is_sampled({"temperature": 0})
    assert not is_sampled({"temperature": 0.0, "top_p": 1})


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How many miles is 5 km?", "How many miles is 50 km?"),
        ("Who founded Microsoft?", "Who founded Apple?"),
        ("Is coffee healthy?", "Is coffee not healthy?"),
        ("Convert 10 kg to pounds", "Convert 10 lb to kilograms"),
        ("Why can't I sleep?", "Why can I sleep?"),
    ],
)
def test_near_misses_differ_in_their_literals(a: str, b: str) -> None:
    assert literals(a) != literals(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is the capital of France?", "Tell me the capital city of France."),
        ("How many miles is 5 kilometres?", "5 km is how many miles?"),
        ("Explain recursion briefly.", "Could you explain what recursion is?"),
    ],
)
def test_paraphrases_share_their_literals(a: str, b: str) -> None:
    assert literals(a) == literals(b)


def test_the_system_prompt_is_part_of_the_literals() -> None:
    assert literals("hi", "be brief") != literals("hi", "answer in French")
    assert literals("hi", "be brief") == literals("hi", "be brief")


PAIRS = Path(__file__).resolve().parents[3] / "bench" / "data" / "semantic_pairs.jsonl"


def test_the_calibration_set_s_near_misses_differ_in_their_literals() -> None:
    """The guard is what keeps near misses out (embeddings put them at 0.95 to 0.99): every pair of
    bench/data/semantic_pairs.jsonl that differs in a number, unit or negation must differ in its
    literals, nearly every one that differs in a name too, and most paraphrases must keep theirs."""
    pairs = [json.loads(line) for line in PAIRS.read_text("utf-8").splitlines()]
    assert len(pairs) >= 120 and {p["same"] for p in pairs} == {True, False}
    guarded = [p for p in pairs if p["kind"] in ("number", "unit", "negation")]
    assert not [p for p in guarded if literals(p["a"]) == literals(p["b"])]
    names = [p for p in pairs if p["kind"] == "name"]  # lower-case names ("numpy") are the embedding's
    assert sum(literals(p["a"]) != literals(p["b"]) for p in names) >= 0.9 * len(names)
    paraphrases = [p for p in pairs if p["same"]]
    kept = sum(literals(p["a"]) == literals(p["b"]) for p in paraphrases)
    assert kept >= 0.9 * len(paraphrases)
