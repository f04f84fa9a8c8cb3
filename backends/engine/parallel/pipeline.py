"""Pipeline stages: each rank's model keeps the whole layer list, and the layers another stage holds are
stand-ins that pass the hidden states along, receive them from the previous stage, or send them on.

A stage is a contiguous run of decoder layers (``ParallelLayout.stage_layers``). On stage s:

- the layer just before the stage (the previous stage's last) is ``ReceiveHidden``: its output is the
  hidden states that stage sent;
- the layer just after it (the next stage's first) is ``SendHidden``: it sends this stage's output on;
- every other layer outside the stage is ``LayerElsewhere`` (passes its input through), the embedding
  on every stage but the first is ``EmbeddingElsewhere``, and the LM head on every stage but the last
  is ``HeadElsewhere``, or on rank 0 ``LogitsFromLastStage``, which receives the last stage's logits.

So a model's own ``forward`` and ``compute_logits`` run unchanged on every rank: the stand-ins do the
point-to-point traffic where the stage boundaries fall. A decoder layer is called either as
``(positions, h, residual, meta) -> (h, residual)`` (Llama, whose residual add is fused into the next
norm) or ``(positions, h, meta) -> h`` (Gemma 3); the stand-ins answer in the caller's shape. What
crosses a boundary is one [tokens, hidden] tensor: Llama's pending residual add is done before sending,
and the receiving stage's first layer starts from it as from an embedding.

A step may come as several micro-batches (``micro_batches.py``): every stage runs its part of each in
turn, and the stand-ins tag their traffic with the micro-batch's number (``StageTraffic``). Sends do
not block, so a stage goes on with micro-batch k + 1 while the next one computes k; rank 0 runs its
stage for every micro-batch first and only then asks its LM head stand-in for each one's logits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from backends.engine.parallel.group import ParallelGroup, StageTraffic


class HeldElsewhere(nn.Module):
    """A part of the model another pipeline stage holds: no weights here (the loader skips its names)."""


class LayerElsewhere(HeldElsewhere):
    """A decoder layer of another stage, away from this stage's edges: passes its input through."""

    def forward(self, positions: torch.Tensor, h: torch.Tensor, *rest: Any) -> Any:
        del positions
        return h if len(rest) == 1 else (h, rest[0])


class ReceiveHidden(HeldElsewhere):
    """The previous stage's last layer: returns the hidden states that stage sent."""

    def __init__(self, src: int, traffic: StageTraffic) -> None:
        super().__init__()
        self.src = src
        self.traffic = traffic

    def forward(self, positions: torch.Tensor, h: torch.Tensor, *rest: Any) -> Any:
        del positions
        received = self.traffic.recv(torch.empty_like(h), src=self.src, per_token=True)
        return received if len(rest) == 1 else (received, None)  # the next layer starts a residual


class SendHidden(HeldElsewhere):
    """The next stage's first layer: sends this stage's output there (the residual added in first),
    without waiting for it to arrive."""

    def __init__(self, dst: int, traffic: StageTraffic) -> None:
        super().__init__()
        self.dst = dst
        self.traffic = traffic

    def forward(self, positions: torch.Tensor, h: torch.Tensor, *rest: Any) -> Any:
        del positions
        residual = rest[0] if len(rest) == 2 else None
        # a tensor of its own: the send is still reading it while the caller goes on with h in place
        self.traffic.isend(h.clone() if residual is None else h + residual, dst=self.dst)
        return h if len(rest) == 1 else (h, residual)


class EmbeddingElsewhere(HeldElsewhere):
    """The first stage's embedding: an unwritten [tokens, hidden] that ``ReceiveHidden`` replaces."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        # a buffer, so the model's .to(dtype) and device reach the stand-in's output
        self.register_buffer("like", torch.empty(0, hidden_size), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        like = self.get_buffer("like")
        return like.new_empty(input_ids.shape[0], like.shape[1])


class HeadElsewhere(HeldElsewhere):
    """The LM head on a rank that ends with no logits: an empty [rows, 0]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(x.shape[0], 0)


class LogitsFromLastStage(HeldElsewhere):
    """Rank 0's LM head when the last stage holds the real one: receives the current micro-batch's
    [rows, vocab] logits (``x`` only gives the row count)."""

    def __init__(self, vocab_size: int, src: int, traffic: StageTraffic) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.src = src
        self.traffic = traffic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.traffic.recv(x.new_empty(x.shape[0], self.vocab_size), src=self.src, per_token=False)


def layer_stand_ins(num_layers: int, group: ParallelGroup) -> dict[int, HeldElsewhere]:
    """The stand-in of every layer outside ``group``'s stage, by layer index."""
    stage = group.layout.stage_layers(num_layers, group.pp_rank)
    stand_ins: dict[int, HeldElsewhere] = {}
    for i in range(num_layers):
        if i in stage:
            continue
        if i == stage.start - 1:
            stand_ins[i] = ReceiveHidden(group.prev_rank, group.traffic)
        elif i == stage.stop:
            stand_ins[i] = SendHidden(group.next_rank, group.traffic)
        else:
            stand_ins[i] = LayerElsewhere()
    return stand_ins


def head_stand_in(vocab_size: int, group: ParallelGroup) -> HeldElsewhere:
    """The LM head of a stage before the last: rank 0 receives the logits, the others get none."""
    if group.rank == 0:
        return LogitsFromLastStage(vocab_size, group.logits_rank, group.traffic)
    return HeadElsewhere()
