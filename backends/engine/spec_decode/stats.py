"""Speculative decoding's counters, exported under vLLM's ``vllm:spec_decode_*`` names."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecDecodeStats:
    """Totals since start-up: drafts (sequence-steps that verified proposals), proposed tokens, accepted
    tokens, and accepted tokens by position in the draft (the first proposal, the second, ...)."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def observe(self, num_proposed: int, num_accepted: int) -> None:
        """One sequence-step: ``num_proposed`` tokens verified, the first ``num_accepted`` kept."""
        self.num_drafts += 1
        self.num_draft_tokens += num_proposed
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_pos) < num_proposed:
            self.accepted_per_pos.extend([0] * (num_proposed - len(self.accepted_per_pos)))
        for pos in range(num_accepted):
            self.accepted_per_pos[pos] += 1

    @property
    def acceptance_rate(self) -> float:
        """Accepted over proposed tokens (0 before any proposal)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens a verified step appends on average: the accepted proposals plus the one sampled after."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0
