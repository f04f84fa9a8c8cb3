"""Request cues: the labelling guide's small tasks and proofs, read from the instruction."""

from __future__ import annotations

import pytest

from gateway.tiers.cues import request_cue


@pytest.mark.parametrize(
    "text",
    [
        "Edit the following paragraph to correct any grammatical errors: She go to school yesterday.",
        "check grammar: the patient have a fever since two days",
        "Translate 'see you tomorrow' into Spanish.",
        "Rewrite the sentence in a more formal tone: gonna be late, sorry",
        "Can you rephrase this: the meeting got moved to Friday.",
        "Extract the email addresses from this text: write to ana@example.com or bo@example.com",
        "Classify the following review as positive or negative: great battery, awful screen.",
        "Suggest a catchy title for my post about sourdough bread.",
        "hey, good morning!",
        "Thanks a lot, that helped!",
        "What is 17 * 23?",
        "Convert 5 miles to kilometres.",
    ],
)
def test_small_tasks(text: str) -> None:
    assert request_cue(text) == "small_task"


@pytest.mark.parametrize(
    "text",
    [
        "Prove that there are infinitely many primes.",
        "Derive the closed form of the geometric series.",
        "Design a multi-region payments system with exactly-once settlement.",
        "Write a threat model for our OAuth login flow.",
    ],
)
def test_large_tasks(text: str) -> None:
    assert request_cue(text) == "large_task"


@pytest.mark.parametrize(
    "text",
    [
        "Write a 500 word essay about the history of tea.",  # no small task asked for
        "Rewrite this as a 1000 word story about a dragon.",  # a long piece of writing
        "Write Python code to extract the text from PDF files.",  # code, whatever the verb
        "Your answer must contain a title, wrapped in double angular brackets.",  # a format, not a task
        "Return the translation vector of the camera pose.",  # not a translation request
        "Rewrite the following document in plain English:\n" + "word " * 1000,  # too long to be small
        "Explain how vaccines work.",
        "What is 17 * 23, and why do so many people find long multiplication hard to learn?",
        "Convert this JSON to CSV in Python.",
        "Hello, I need a plan to migrate our billing system to a new database without downtime.",
    ],
)
def test_no_cue(text: str) -> None:
    assert request_cue(text) is None


def test_cue_is_read_from_head_and_tail_only() -> None:
    middle = "Filler sentence about nothing in particular. " * 40
    assert request_cue("Summarise this.\n" + middle + "\nfix the spelling please") == "small_task"
    assert request_cue("Summarise this.\n" + middle + "translate it into French\n" + middle) is None
