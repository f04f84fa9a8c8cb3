"""Rejection sampling over one speculative step: which proposed tokens the target model keeps.

With target distribution p and proposal distribution q at each drafted position, proposal d is kept with
probability min(1, p(d) / q(d)); at the first rejection a token is drawn from the residual
max(0, p - q) renormalised, and when every proposal is kept one more is drawn from p at the position
after them. Each appended token is then distributed exactly as p (Leviathan et al., 2023; Chen et al.,
2023), so speculative sampling changes speed, never the output distribution. A proposer without a
distribution (n-gram lookup) is a point mass: q(d) = 1, and the residual is p with d removed.

A structured request's draft is first cut where its grammar refuses it, and each remaining row masked to
what the grammar allows after the proposals before it (``structured_output.bitmask.mask_draft``): the
kept tokens and the one after them then follow the grammar as a plain step's would.

Greedy requests keep the longest run of proposals equal to the target's argmax and append the argmax
after it: token for token the output of plain greedy decoding.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from backends.engine.sampler import draw, masked_probs
from backends.engine.sequence import Sequence
from backends.engine.structured_output.bitmask import mask_draft


def verify(
    logits: torch.Tensor, proposal: Seq[int], seq: Sequence, proposal_probs: torch.Tensor | None = None
) -> list[int]:
    """The tokens to append to ``seq``: the kept prefix of ``proposal`` and one token after it.

    ``logits`` [k + 1, vocab] are the target's at seq's last token and at each of the k proposed ones;
    ``proposal_probs`` [k, vocab] the proposer's distributions (None: point masses on the proposal).
    """
    assert logits.shape[0] == len(proposal) + 1, "one row per proposed token plus one"
    if seq.grammar is not None:  # structured: cut the draft where the grammar refuses it, mask each row
        logits, proposal = mask_draft(logits, proposal, seq.grammar)
        proposal_probs = None if proposal_probs is None else proposal_probs[: len(proposal)]
    k = len(proposal)
    if seq.params.is_greedy:
        target = logits.argmax(dim=-1).tolist()
        kept = 0
        while kept < k and proposal[kept] == target[kept]:
            kept += 1
        return [*proposal[:kept], target[kept]]
    probs = masked_probs(logits.float(), [seq] * (k + 1))
    gen = seq.generator
    uniforms = torch.rand(k, generator=gen, device=probs.device, dtype=probs.dtype).tolist()
    for i, token in enumerate(proposal):
        p = float(probs[i, token])
        q = 1.0 if proposal_probs is None else float(proposal_probs[i, token])
        if uniforms[i] * q < p:  # kept with probability min(1, p / q)
            continue
        if proposal_probs is None:
            residual = probs[i].clone()
            residual[token] = 0.0
        else:
            residual = (probs[i] - proposal_probs[i].to(probs.dtype)).clamp_(min=0.0)
        if float(residual.sum()) <= 0.0:  # p == q (rounding): any draw from p is exact
            residual = probs[i]
        return [*proposal[:i], int(draw(residual, gen))]
    return [*proposal, int(draw(probs[k], gen))]
