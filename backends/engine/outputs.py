"""What the engine hands back after each step (cumulative per request)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    stop_reason: str | int | None = None
    """The stop string or stop token id that ended it (finish_reason "stop"); None for eos and the rest."""


@dataclass
class RequestMetrics:
    """When things happened to a request, in ``time.perf_counter()`` seconds."""

    first_scheduled_s: float | None = None
    """The scheduler first picked some of its tokens (the end of its queue wait)."""


@dataclass
class RequestOutput:
    """The state of one request after a step."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache."""
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
