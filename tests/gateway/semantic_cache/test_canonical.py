"""gateway/semantic_cache/canonical.py: what is embedded, what is skipped, and the literal guard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.semantic_cache.canonical import (
    MAX_EMBED_CHARS,
    canonical_text,
    is_sampled,
    literals,
    literals_match,
    scope,
)


def chat(*messages: tuple[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "small", "messages": [{"role": r, "content": c} for r, c in messages], **fields}


def test_only_the_last_user_turn_is_embedded_and_bounded() -> None:
    body = chat(("system", "s" * 1000), ("user", "hi"), ("assistant", "hello"), ("user", "q" * 5000))
    assert canonical_text(body) == "q" * MAX_EMBED_CHARS


def test_text_parts_are_joined_and_developer_counts_as_system() -> None:
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert canonical_text(chat(("developer", "be brief"), ("user", parts))) == "one\ntwo"
    assert scope(chat(("developer", "be brief"), ("user", "x"))) == scope(
        chat(("system", "be brief"), ("user", "y"))
    )


def test_the_whole_context_is_in_the_scope() -> None:
    preamble = "p" * 258  # longer than any cut of the context
    question = ("user", "What is my monthly budget?")
    budget = [
        chat(("system", preamble + f" My monthly budget is {n} dollars."), question) for n in (5000, 9000)
    ]
    assert scope(budget[0]) != scope(budget[1])
    turns = [chat(("user", "x" * 300 + tail), ("assistant", "ok"), ("user", "and then?")) for tail in "ab"]
    assert scope(turns[0]) != scope(turns[1])
    assert scope(chat(("system", "be brief"), ("user", "q"))) != scope(chat(("user", "q")))
    assert scope(chat(("system", "be brief"), ("user", "q"))) == scope(
        chat(("system", "be brief"), ("user", "Q?"))
    )


def test_the_last_turn_past_the_embedded_part_is_in_the_scope() -> None:
    head = "q" * MAX_EMBED_CHARS
    assert scope(chat(("user", head + " budget 5000"))) != scope(chat(("user", head + " budget 9000")))


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": 3},
        {"max_completion_tokens": 300},
        {"logprobs": True, "top_logprobs": 2},
        {"stop": ["\n"]},
        {"seed": 7},
        {"model": "large"},
        {"presence_penalty": 0.5},
        {"response_format": {"type": "text"}},
    ],
)
def test_fields_that_change_the_answer_are_in_the_scope(fields: dict[str, Any]) -> None:
    assert scope(chat(("user", "q"), **fields)) != scope(chat(("user", "q")))


@pytest.mark.parametrize(
    "fields",
    [
        {"stream": True, "stream_options": {"include_usage": True}},
        {"user": "u-1", "metadata": {"trace": "x"}},
        {"n": 1, "top_p": 1, "logprobs": False, "max_tokens": None},  # the defaults, spelled out
    ],
)
def test_delivery_fields_and_spelled_out_defaults_are_not(fields: dict[str, Any]) -> None:
    assert scope(chat(("user", "q"), **fields)) == scope(chat(("user", "q")))


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
        ("What is -40 degrees Celsius in Fahrenheit?", "What is 40 degrees Celsius in Fahrenheit?"),
        ("What is minus 40 degrees Celsius in Fahrenheit?", "What is 40 degrees Celsius in Fahrenheit?"),
        ("Divide 100 by 4.", "Divide 4 by 100."),
        ("Subtract 3 from 10.", "Subtract 10 from 3."),
        ("Is 7 greater than 12?", "Is 12 greater than 7?"),
        ("Is it safe to eat raw eggs?", "Is it unsafe to eat raw eggs?"),
        ("Is this move legal?", "Is this move illegal?"),
        ("Is the paint toxic?", "Is the paint non-toxic?"),
        ("How do I install numpy?", "How do I uninstall numpy?"),
    ],
)
def test_near_misses_differ_in_their_literals(a: str, b: str) -> None:
    assert not literals_match(literals(a), literals(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is the capital of France?", "Tell me the capital city of France."),
        ("How many miles is 5 kilometres?", "5 km is how many miles?"),
        ("Explain recursion briefly.", "Could you explain what recursion is?"),
        ("Convert -40 Celsius to Fahrenheit.", "What is -40 Celsius in Fahrenheit?"),
        ("What is 10 minus 3?", "What is 10 - 3?"),  # a subtraction, not a sign
        ("Convert 5 km to miles.", "How many miles are in 5 km?"),
        ("Is it unsafe to eat raw eggs?", "Is eating raw eggs unsafe?"),
        ("What are the symptoms of COVID-19?", "Which symptoms does COVID-19 cause?"),
    ],
)
def test_paraphrases_share_their_literals(a: str, b: str) -> None:
    assert literals_match(literals(a), literals(b))


def test_the_scope_must_match_even_without_the_literal_guard() -> None:
    assert not literals_match(literals("hi", "s1"), literals("hi", "s2"), exact=False)
    assert literals_match(literals("5 km", "s1"), literals("50 km", "s1"), exact=False)
    assert not literals_match(literals("5 km", "s1"), literals("50 km", "s1"))


PAIRS = Path(__file__).resolve().parents[3] / "bench" / "data" / "semantic_pairs.jsonl"


def test_the_calibration_set_s_near_misses_differ_in_their_literals() -> None:
    """The guard is what keeps near misses out (embeddings put them at 0.95 to 0.99): every pair of
    bench/data/semantic_pairs.jsonl that differs in a number, sign, number order, unit or negation
    must differ in its literals, nearly every one that differs in a name too, and most paraphrases
    must keep theirs."""
    pairs = [json.loads(line) for line in PAIRS.read_text("utf-8").splitlines()]
    assert len(pairs) >= 120 and {p["same"] for p in pairs} == {True, False}
    guarded = [p for p in pairs if p["kind"] in ("number", "unit", "negation", "sign", "order")]
    assert not [p for p in guarded if literals_match(literals(p["a"]), literals(p["b"]))]
    names = [p for p in pairs if p["kind"] == "name"]  # lower-case names ("numpy") are the embedding's
    assert sum(not literals_match(literals(p["a"]), literals(p["b"])) for p in names) >= 0.9 * len(names)
    paraphrases = [p for p in pairs if p["same"]]
    kept = sum(literals_match(literals(p["a"]), literals(p["b"])) for p in paraphrases)
    assert kept >= 0.9 * len(paraphrases)
