"""The batch's token bitmask: one bit per vocabulary entry per row, applied to the logits in place.

Only constrained rows are filled and masked; free rows cost nothing. Masking sets every token the row's
grammar refuses to -inf, before penalties, temperature and top-k/p, so whatever picks the token (argmax,
a seeded draw, speculative verification) picks an allowed one. On the CPU this is xgrammar's CPU kernel
(docs/benchmarks.md has its cost); on CUDA its GPU kernel takes the bitmask copied over.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import xgrammar as xgr

from backends.engine.structured_output.matcher import SequenceGrammar

__all__ = ["apply_bitmask", "apply_grammars", "mask_draft", "new_bitmask"]


def new_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """A CPU int32 bitmask of ``num_rows`` rows, every token allowed."""
    return xgr.allocate_token_bitmask(num_rows, vocab_size)


def apply_grammars(logits: torch.Tensor, grammars: Sequence[SequenceGrammar | None]) -> None:
    """Mask each row of ``logits`` [rows, vocab] whose grammar is set to the tokens it allows next."""
    rows = [i for i, grammar in enumerate(grammars) if grammar is not None]
    if not rows:
        return
    bitmask = new_bitmask(logits.shape[0], logits.shape[-1])
    for i in rows:
        grammar = grammars[i]
        assert grammar is not None
        grammar.fill_bitmask(bitmask, i)
    apply_bitmask(logits, bitmask, rows)


@torch.inference_mode()  # the logits are the model runner's inference tensors
def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int] | None = None) -> None:
    """``logits[r]`` of each row r in ``rows`` (None: all) keeps the tokens ``bitmask[r]`` allows and
    gets -inf elsewhere; float32 logits, in place."""
    if logits.device != bitmask.device:
        bitmask = bitmask.to(logits.device, non_blocking=True)
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=logits.shape[-1], indices=rows)


def mask_draft(
    logits: torch.Tensor, draft: Sequence[int], grammar: SequenceGrammar
) -> tuple[torch.Tensor, list[int]]:
    """A speculative step's rows under the grammar: ``logits`` [k + 1, vocab] are the target's at the
    sequence's last token and at each of the k proposals. The draft is cut before the first token the
    grammar refuses (or that would end it), and each remaining row is masked to what the grammar allows
    after the draft tokens before it; the masked float32 rows [kept + 1, vocab] and the kept draft."""
    bitmask = new_bitmask(len(draft) + 1, logits.shape[-1])
    num_kept = grammar.fill_draft_bitmask(bitmask, draft)
    rows = logits[: num_kept + 1].float()
    apply_bitmask(rows, bitmask[: num_kept + 1])
    return rows, list(draft[:num_kept])
