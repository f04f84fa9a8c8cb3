"""``SequenceGrammar``: where one sequence stands in its grammar (an xgrammar ``GrammarMatcher``).

The engine attaches one to each constrained sequence at admission (each of n completions its own). The
scheduler advances it with every token it appends, so its state always matches the sequence's output
tokens: a sequence preempted by recompute keeps both. A speculative step checks proposals against it
(``mask_draft``) and rolls back what it tried; a grammar that accepted its stop token is terminated, and
its sequence ends there.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import xgrammar as xgr

__all__ = ["SequenceGrammar"]


class SequenceGrammar:
    """One sequence's grammar state: which tokens may come next, advanced token by token."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)
        self.num_accepted = 0
        """Tokens accepted so far (the sequence's output tokens)."""

    @property
    def is_terminated(self) -> bool:
        """The grammar accepted its stop token: the output is complete and nothing may follow."""
        return bool(self.matcher.is_terminated())

    @property
    def is_completed(self) -> bool:
        """What was accepted is a whole match (the stop token may come next)."""
        return bool(self.matcher.is_completed())

    def accept(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) when the grammar does not allow it."""
        ok = bool(self.matcher.accept_token(token_id))
        self.num_accepted += ok
        return ok

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` (a CPU int32 tensor, one bit a token)."""
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def fill_draft_bitmask(self, bitmask: torch.Tensor, draft: Sequence[int]) -> int:
        """For a speculative step: ``bitmask[i]`` gets the tokens allowed after ``draft[:i]``, for as long
        as the draft stays inside the grammar; the number of draft tokens kept (those before the first
        token the grammar refuses or that would end it). The state is rolled back afterwards: what the
        step keeps is accepted again when the scheduler appends it."""
        num_accepted = num_kept = 0
        self.fill_bitmask(bitmask, 0)
        for token in draft:
            if not _allows(bitmask, num_kept, token) or not self.matcher.accept_token(token):
                break
            num_accepted += 1
            if self.matcher.is_terminated():  # a stop token: the bonus row may sample it instead
                break
            num_kept += 1
            self.fill_bitmask(bitmask, num_kept)
        if num_accepted:
            self.matcher.rollback(num_accepted)
        return num_kept


def _allows(bitmask: torch.Tensor, row: int, token: int) -> bool:
    """Whether ``bitmask[row]`` lets ``token`` through (checked before the matcher is asked, which would
    log a warning for every special token a proposer drafts)."""
    return token < bitmask.shape[1] * 32 and bool((int(bitmask[row, token >> 5]) >> (token & 31)) & 1)
