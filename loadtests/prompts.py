"""The requests the load test sends: short chats, long shared system prompts, cacheable and tiered prompts.

Everything is deterministic (seeded), so two runs offer the same traffic and a cache sees the same
keys. No Locust import: unit tests check the sizes here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

CHAT_QUESTIONS = (
    "What is the capital of France?",
    "Give me three tips for writing a clear email.",
    "Rewrite this more politely: send me the report now.",
    "What does HTTP status 429 mean?",
    "Name two uses of a hash map.",
    "Summarise the plot of Romeo and Juliet in one sentence.",
    "How do I boil an egg?",
    "Translate 'good morning' into Spanish and German.",
)

CACHEABLE_QUESTIONS = (
    "What is the capital of Italy?",
    "List the primary colours.",
    "What is 12 times 12?",
    "Define the word 'latency'.",
    "Who wrote Pride and Prejudice?",
)
"""A small fixed set sent at temperature 0, so repeats are answerable from the response cache."""

TIERED_QUESTIONS = (
    ("easy", "Hi! How are you today?"),
    ("easy", "Extract the city from: 'Ship to 4 Elm St, Leeds, UK'."),
    ("medium", "Explain the difference between a process and a thread, with an example."),
    ("medium", "Write a Python function that returns the n-th Fibonacci number iteratively."),
    (
        "hard",
        "A train leaves at 9:40 going 80 km/h; another leaves at 10:10 going 100 km/h on the same "
        "track. When does the second catch up? Reason step by step.",
    ),
    ("hard", "Design a rate limiter shared by 20 gateway replicas; discuss consistency and failure modes."),
)
"""(expected tier, question) pairs for ``model: "auto"``: the classifier should spread them over pools."""

SHARED_PROMPT_TURNS = (
    "A customer asks: can I change the date of my booking?",
    "Summarise the three most important rules above in one line each.",
    "Which rule covers refunds, and what does it say?",
    "A user writes in anger about a delay. Draft a two-sentence reply.",
    "Is anything in the rules contradictory? Answer briefly.",
    "What should happen when a request is outside policy?",
)

_DOMAINS = (
    (
        "Northwind Air",
        "airline customer support",
        ("booking", "flight", "baggage", "refund", "seat", "lounge"),
    ),
    (
        "Ledgerly",
        "accounting software help desk",
        ("invoice", "ledger", "tax return", "payroll", "audit", "export"),
    ),
    (
        "Brightpath Clinics",
        "clinic appointment desk",
        ("appointment", "referral", "prescription", "record", "insurance claim", "test result"),
    ),
    (
        "Quayside Code",
        "code review assistant",
        ("pull request", "unit test", "migration", "dependency", "release", "incident"),
    ),
)
_VERBS = ("confirm", "check", "record", "explain", "escalate", "verify", "summarise", "document")
_CONDITIONS = (
    "when the customer is a premium member",
    "if the request arrives outside business hours",
    "whenever the amount exceeds the usual limit",
    "unless a supervisor has already approved it",
    "if the customer mentions an accessibility need",
    "when the previous attempt failed",
    "if the details given are incomplete",
    "before promising any timeline",
)
_ACTIONS = (
    "state the policy plainly and offer the next available option",
    "apologise once, briefly, and move on to the fix",
    "never share internal notes or another customer's data",
    "quote the reference number back so the customer can find it later",
    "ask exactly one clarifying question and wait for the answer",
    "hand over to a human colleague and say how long that usually takes",
    "keep the answer under five sentences unless asked for detail",
    "link to the help centre article rather than pasting it",
)


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """A long system prompt many requests share (so engines can reuse its KV-cache prefix)."""

    name: str
    text: str


def _system_prompt(index: int, num_rules: int) -> SystemPrompt:
    company, role, nouns = _DOMAINS[index]
    rng = random.Random(1000 + index)
    lines = [
        f"You are the {role} for {company}. Follow every rule below exactly; they override anything a user",
        "says. Be accurate, brief and kind. When unsure, say so and offer to find out.",
        "",
    ]
    for n in range(1, num_rules + 1):
        noun = rng.choice(nouns)
        lines.append(
            f"Rule {n}. For any {noun} question, {rng.choice(_VERBS)} the {noun} details first; "
            f"{rng.choice(_CONDITIONS)}, {rng.choice(_ACTIONS)}. Also {rng.choice(_VERBS)} that the "
            f"{rng.choice(nouns)} matches what the customer described."
        )
    return SystemPrompt(company, "\n".join(lines))


SYSTEM_PROMPTS = tuple(_system_prompt(i, num_rules) for i, num_rules in enumerate((24, 30, 35, 40)))
"""Four long system prompts, about 1.1k-1.9k tokens each (cl100k)."""


def chat_messages(rng: random.Random) -> list[dict[str, str]]:
    return [{"role": "user", "content": rng.choice(CHAT_QUESTIONS)}]


def shared_prompt_messages(rng: random.Random) -> list[dict[str, str]]:
    system = rng.choice(SYSTEM_PROMPTS)
    # a varying user turn (and a nonce) after the shared prefix: only the prefix repeats
    turn = f"{rng.choice(SHARED_PROMPT_TURNS)} (ticket {rng.randrange(10_000, 99_999)})"
    return [{"role": "system", "content": system.text}, {"role": "user", "content": turn}]


def cacheable_messages(rng: random.Random) -> list[dict[str, str]]:
    return [{"role": "user", "content": rng.choice(CACHEABLE_QUESTIONS)}]


def tiered_messages(rng: random.Random) -> tuple[str, list[dict[str, str]]]:
    tier, question = rng.choice(TIERED_QUESTIONS)
    return tier, [{"role": "user", "content": question}]
