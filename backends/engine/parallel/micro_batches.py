"""Micro-batches in flight through the pipeline stages (GPipe within one step).

Without them a step's batch crosses the stages one after another, and every stage but one idles. Rank 0
splits the step's scheduled sequences into M contiguous groups balanced by token count (``count``,
``split``), prepares each as a step of its own (token ids, positions, attention metadata, the rows to
sample) and sends all M to every worker. Then every rank runs ``run_stage``: its stage's part of
micro-batch 0, its boundary hidden states sent on without waiting (``StageTraffic.isend``), then
micro-batch 1, and so on, so that stage s + 1 computes micro-batch k while stage s computes k + 1.
Rank 0 (stage 0, and the sampler) runs its part of every micro-batch first, then receives the last
stage's logits of each in order; as the groups are contiguous, their logits concatenate in the
scheduler's order. The tensor ranks of a stage run the micro-batches in the same order, so their
collectives stay matched. Each micro-batch's sequences write and read only their own KV slots (a
prefix-cache hit is a block computed in an earlier step), so the split changes no result. It is not
free: each micro-batch reads its stage's weights again, which a decode step (weight-bound) pays in
full; docs/engine.md has the figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import torch

from backends.engine.layers.attention import AttentionMetadata
from backends.engine.parallel.group import StageTraffic
from backends.engine.parallel.workers import StepInputs


class StageModel(Protocol):
    """What ``run_stage`` needs of a rank's model (``LlamaForCausalLM``; the models import this
    package, so it is named by its shape here)."""

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


def count(setting: int, num_stages: int, num_seqs: int, *, backend: str = "gloo") -> int:
    """How many micro-batches a step of ``num_seqs`` sequences is split into: ``setting``
    (``EngineConfig.pipeline_micro_batches``; 0: one a stage) but at most one a sequence, and one when
    there is a single stage (nothing to overlap). Automatic is one over NCCL: rank 0 sends every
    micro-batch to the next stage before it receives their logits, and NCCL runs a pair's sends and
    receives in issue order on one stream, which may not complete before the order has been grouped
    and run on GPUs (an explicit setting is taken as asked)."""
    if num_stages <= 1 or num_seqs <= 1:
        return 1
    if setting == 0 and backend != "gloo":
        return 1
    return min(setting or num_stages, num_seqs)


def split(num_tokens: Sequence[int], parts: int) -> list[range]:
    """``parts`` contiguous, non-empty runs of the items whose sizes are ``num_tokens`` (``parts`` <=
    their number), cut where the running token count comes nearest each 1/parts of the total."""
    n = len(num_tokens)
    assert 1 <= parts <= n, (parts, n)
    prefix = [0]
    for tokens in num_tokens:
        prefix.append(prefix[-1] + tokens)
    total = prefix[-1]
    cuts = [0]
    for k in range(1, parts):
        target = total * k / parts
        # at least one item in this run, and one left for each run after it
        candidates = range(cuts[-1] + 1, n - (parts - k) + 1)
        cuts.append(min(candidates, key=lambda i: (abs(prefix[i] - target), i)))
    cuts.append(n)
    return [range(a, b) for a, b in itertools.pairwise(cuts)]


@torch.inference_mode()
def run_stage(
    model: StageModel, traffic: StageTraffic, steps: Sequence[StepInputs], *, logits_last: bool
) -> torch.Tensor:
    """This rank's part of a step's micro-batches, in order; the logits of their sampled rows,
    concatenated ([0, 0] or [rows, 0] on a rank that gets none).

    ``logits_last``: rank 0's way: its stage's part of every micro-batch first, then each one's logits
    (which its LM head stand-in receives from the last stage). A worker computes each micro-batch's
    logits right after it (the last stage sends them to rank 0 without waiting)."""
    try:
        traffic.begin([(len(step.input_ids), len(step.sample_index)) for step in steps])
        rows: list[torch.Tensor] = []
        logits: list[torch.Tensor] = []
        for k, step in enumerate(steps):
            traffic.micro_batch = k
            hidden = model(step.input_ids, step.positions, step.meta).index_select(0, step.sample_index)
            if logits_last:
                rows.append(hidden)
            else:
                logits.append(model.compute_logits(hidden).float())
        for k, hidden in enumerate(rows):
            traffic.micro_batch = k
            logits.append(model.compute_logits(hidden).float())
        traffic.wait_all()
    finally:
        traffic.reset()
    return logits[0] if len(logits) == 1 else torch.cat(logits)
