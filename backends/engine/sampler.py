"""Logits -> next tokens: grammar masks, penalties, temperature, top-k / top-p / min-p, seeded sampling,
logprobs.

Every random draw comes from the sequence's own ``torch.Generator``, so a seeded request gets the same
tokens whatever else shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backends.engine.sequence import Sequence
from backends.engine.structured_output.bitmask import apply_grammars


@dataclass
class SampleResult:
    token_ids: list[list[int]]
    """Per sequence, the tokens to append: one, or a speculative step's accepted proposals and the
    token sampled after them."""
    logprobs: list[tuple[float, list[tuple[int, float]]] | None]
    """Per sequence, when asked: (logprob of the chosen token, [(id, logprob)] top-k)."""


REPETITION_PENALTY_LIMIT = 1e30
"""A repetition penalty is clamped into [1e-30, 1e30]: past it, float32 logits divided (multiplied) by it
overflow to inf, and seen tokens tied at inf lose their order (greedy then takes the lowest id, some
special token); within it, they keep it, and every seen token already beats (or loses to) every unseen
one, as with any more extreme penalty."""


class Sampler:
    # the logits are the model runner's inference tensors; penalties update them in place, which torch
    # allows only in inference mode (a float32 model's .float() is the same tensor, not a copy)
    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SampleResult:
        logits = logits.float()
        grammars = [s.grammar for s in seqs]
        if any(g is not None for g in grammars):  # structured outputs: refused tokens are -inf from here on
            apply_grammars(logits, grammars)
        want_logprobs = [s.params.logprobs is not None for s in seqs]
        raw_logprobs = torch.log_softmax(logits, dim=-1) if any(want_logprobs) else None
        for i, seq in enumerate(seqs):
            if seq.params.has_penalties:
                apply_penalties(logits[i], seq)
        chosen = logits.max(dim=-1).indices  # argmax's first index on ties, 2.5x faster on a CPU
        random_rows = [i for i, s in enumerate(seqs) if not s.params.is_greedy]
        if random_rows:
            rows = torch.tensor(random_rows, device=logits.device)
            probs = masked_probs(logits[rows], [seqs[i] for i in random_rows])
            for j, i in enumerate(random_rows):
                chosen[i] = draw(probs[j], seqs[i].generator)
        token_ids: list[int] = chosen.tolist()
        logprobs: list[tuple[float, list[tuple[int, float]]] | None] = [None] * len(seqs)
        if raw_logprobs is not None:
            for i, seq in enumerate(seqs):
                k = seq.params.logprobs
                if k is None:
                    continue
                row = raw_logprobs[i]
                top = row.topk(k) if k else None
                top_list = list(zip(top.indices.tolist(), top.values.tolist(), strict=True)) if top else []
                logprobs[i] = (float(row[token_ids[i]]), top_list)
        return SampleResult([[t] for t in token_ids], logprobs)


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token from ``probs`` (a row, not necessarily normalised) by the exponential race: the argmax
    of probs / Exp(1) noise is distributed as probs."""
    noise = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / noise).argmax()


def apply_penalties(row: torch.Tensor, seq: Sequence) -> None:
    """OpenAI presence/frequency penalties on output tokens; HF-style repetition penalty on all seen;
    OpenAI's logit bias."""
    p = seq.params
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(seq.token_ids)), device=row.device)
        vals = row[seen]
        penalty = min(max(p.repetition_penalty, 1 / REPETITION_PENALTY_LIMIT), REPETITION_PENALTY_LIMIT)
        penalised = torch.where(vals > 0, vals / penalty, vals * penalty)
        # a logit past float32's range anyway (whose softmax is NaN) stays finite, a grammar's -inf a ban
        top = torch.finfo(row.dtype).max
        penalised = penalised.nan_to_num(nan=0.0, posinf=top, neginf=-top)
        row[seen] = torch.where(vals.isneginf(), vals, penalised)
    if (p.presence_penalty or p.frequency_penalty) and seq.num_output_tokens:
        out = torch.tensor(seq.output_token_ids, device=row.device)
        counts = torch.bincount(out, minlength=row.shape[0]).to(row.dtype)
        row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(row.dtype)
    # an id the model lacks is never sampled, so its bias is moot (the server refuses it with a 400); left
    # in, it would fail the whole batch's step
    bias = {t: b for t, b in p.logit_bias.items() if 0 <= t < row.shape[0]}
    if bias:
        ids = torch.tensor(list(bias), device=row.device)
        row[ids] += torch.tensor(list(bias.values()), device=row.device, dtype=row.dtype)


def masked_probs(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """Softmax of logits / temperature with top-k, top-p and min-p applied, row by row semantics.

    The rows share tensors, so one row's parameter must never fail them all: a top-k at or above the
    vocabulary is no filter and is clamped in Python (a huge int would overflow the int64 tensor), and
    each row is shifted by its max before the temperature divides it (a small temperature then sends the
    unlikely tokens to -inf, never the likely one to inf, whose softmax is NaN)."""
    temps = torch.tensor([s.params.temperature for s in seqs], device=logits.device, dtype=logits.dtype)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temps.unsqueeze(1)
    vocab = logits.shape[1]
    top_ks = [s.params.top_k if 0 < s.params.top_k < vocab else vocab for s in seqs]
    if any(k < vocab for k in top_ks):
        ks = torch.tensor(top_ks, device=logits.device)
        sorted_desc = logits.sort(dim=-1, descending=True).values
        kth = sorted_desc.gather(1, (ks - 1).unsqueeze(1))
        logits = logits.masked_fill(logits < kth, float("-inf"))
    top_ps = [s.params.top_p for s in seqs]
    if any(p < 1.0 for p in top_ps):
        ps = torch.tensor(top_ps, device=logits.device, dtype=logits.dtype)
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop_sorted = (cum - sorted_logits.softmax(dim=-1)) >= ps.unsqueeze(1)
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    min_ps = [s.params.min_p for s in seqs]
    if any(m > 0 for m in min_ps):
        ms = torch.tensor(min_ps, device=logits.device, dtype=logits.dtype)
        threshold = probs.max(dim=-1, keepdim=True).values * ms.unsqueeze(1)
        probs = probs.masked_fill(probs < threshold, 0.0)
    return probs
