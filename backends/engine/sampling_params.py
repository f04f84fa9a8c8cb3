"""Per-request sampling parameters (OpenAI-style names)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from backends.engine.structured_output.spec import StructuredOutput

MAX_LOGPROBS = 20
GREEDY_TEMPERATURE = 1e-5
"""Below this a temperature is greedy (vLLM's ``_SAMPLING_EPS``): dividing float32 logits by less overflows
them to inf, and the softmax of inf is NaN."""


@dataclass
class SamplingParams:
    """How to pick tokens and when to stop, for one request."""

    n: int = 1
    """Completions per prompt; they share the prompt's KV blocks."""
    temperature: float = 1.0
    """0 (or anything below ``GREEDY_TEMPERATURE``) means greedy."""
    top_p: float = 1.0
    top_k: int = -1
    """-1 turns it off; so does any k at or above the vocabulary's size (the sampler clamps it there, as
    vLLM does), however large."""
    min_p: float = 0.0
    seed: int | None = None
    """Makes sampling reproducible whatever else is in the batch."""
    max_tokens: int | None = 16
    """None means up to max_model_len."""
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    """HF's: seen tokens' positive logits divided by it, negative ones multiplied; any finite value > 0
    (the sampler clamps it into [1e-30, 1e30], where float32 logits stay finite and in order)."""
    logprobs: int | None = None
    """None is off; k >= 0 returns the sampled token's logprob plus the top k."""
    logit_bias: dict[int, float] = field(default_factory=dict)
    """Added to a token's logit before sampling (OpenAI's -100 to 100: -100 bans it)."""
    structured: StructuredOutput | None = None
    """What the output must match (a JSON schema, a regex, a grammar, ...); None is free text."""

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        checks: list[tuple[bool, str, str]] = [
            (self.n >= 1, "n", "must be >= 1"),
            (0.0 <= self.temperature < math.inf, "temperature", "must be a finite number >= 0"),
            (0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]"),
            (self.top_k == -1 or self.top_k >= 1, "top_k", "must be -1 (off) or >= 1"),
            (0.0 <= self.min_p <= 1.0, "min_p", "must be in [0, 1]"),
            (self.max_tokens is None or self.max_tokens >= 1, "max_tokens", "must be >= 1"),
            (-2.0 <= self.presence_penalty <= 2.0, "presence_penalty", "must be in [-2, 2]"),
            (-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty", "must be in [-2, 2]"),
            (0.0 < self.repetition_penalty < math.inf, "repetition_penalty", "must be a finite number > 0"),
            (
                self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS,
                "logprobs",
                f"must be in [0, {MAX_LOGPROBS}]",
            ),
            (all(isinstance(s, str) and s for s in self.stop), "stop", "must be non-empty strings"),
            (all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids), "stop_token_ids", "bad id"),
            (
                all(isinstance(t, int) and t >= 0 and -100 <= b <= 100 for t, b in self.logit_bias.items()),
                "logit_bias",
                "must map token ids to biases in [-100, 100]",
            ),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ValueError(f"{name} {why}, got {getattr(self, name)!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        """Anything that changes a row's logits from the tokens or the request (no speculation then)."""
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
            or bool(self.logit_bias)
        )
