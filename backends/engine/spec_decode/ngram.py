"""Prompt lookup (vLLM's ``ngram`` method): propose the tokens that followed the most recent earlier
occurrence of the sequence's last n tokens, trying the longest n first.

Free to run (no model), and strong wherever the output copies its input: edits, summaries with quotes,
code refactors, extraction. Where nothing matches it proposes nothing and the step is a plain decode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.engine.sequence import Sequence

if TYPE_CHECKING:
    import torch


class NgramProposer:
    """Proposes up to ``num_speculative_tokens`` tokens by matching n-grams of ``min_n``..``max_n``
    tokens against the sequence's own prompt and output."""

    def __init__(self, num_speculative_tokens: int, *, min_n: int = 1, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.num_speculative_tokens = num_speculative_tokens
        self.min_n = min_n
        self.max_n = max_n

    def proposal_probs(self, seq: Sequence) -> torch.Tensor | None:
        """Point masses: rejection sampling treats each proposal as certain."""
        return None

    def propose(self, requests: list[tuple[Sequence, int]]) -> list[list[int]]:
        return [propose_ngram(seq.token_ids, k, self.min_n, self.max_n) for seq, k in requests]


def propose_ngram(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The (at most ``k``) tokens after the latest earlier occurrence of the longest suffix of ``tokens``
    of ``min_n``..``max_n`` tokens that occurs earlier; [] when none does."""
    total = len(tokens)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = tokens[total - n :]
        last = suffix[-1]
        # scan candidate ends right to left: the match must end before the suffix itself starts
        end = total - 2
        while end >= n - 1:
            try:
                end = _rindex(tokens, last, n - 1, end)
            except ValueError:
                break
            if tokens[end - n + 1 : end + 1] == suffix:
                return tokens[end + 1 : end + 1 + k]
            end -= 1
    return []


def _rindex(tokens: list[int], value: int, lo: int, hi: int) -> int:
    """The largest i in [lo, hi] with tokens[i] == value (ValueError when none)."""
    for i in range(hi, lo - 1, -1):
        if tokens[i] == value:
            return i
    raise ValueError(value)
