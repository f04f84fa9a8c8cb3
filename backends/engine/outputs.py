"""What the engine hands back after each step (cumulative per request)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprob:
    """One token's log-probability under the model (before temperature and penalties)."""

    token_id: int
    logprob: float
    decoded: str


@dataclass
class CompletionOutput:
    """One of the n completions of a request, cumulative so far."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    """None while running; "stop" | "length" | "abort" | "error"."""
    logprobs: list[tuple[Logprob, list[Logprob]]] | None
    error: str | None = None


@dataclass
class RequestOutput:
    """The state of one request after a step."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache."""
