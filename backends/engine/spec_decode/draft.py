"""A draft model proposes: a smaller (or quantized) model with the target's vocabulary runs k cheap
decode steps per speculative step, on its own KV cache, and hands the target its tokens and the
distributions it drew them from (rejection sampling needs both).

Each target sequence that speculates gets a mirror sequence here with its own block table. Before a
proposal the mirror takes the target's tokens; the K/V it computed for proposals the target rejected lie
past the tokens both agree on and are recomputed. The draft's pool keeps no prefix cache: its blocks
hold proposals that are often rejected, and it must never register those under a prompt's hash.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backends.engine.kv_groups import KVBlocks
from backends.engine.model_runner import ModelRunner
from backends.engine.sampler import draw, masked_probs
from backends.engine.scheduler import ScheduledSeq
from backends.engine.sequence import Sequence


@dataclass(eq=False)
class _Mirror:
    target: Sequence
    seq: Sequence
    """The draft's copy: the target's tokens, then the proposals of the current step."""
    num_synced: int
    """Tokens of ``seq`` known equal to the target's (its length at the last sync)."""
    generator: torch.Generator | None
    probs: torch.Tensor | None = None
    """[k, vocab] the distributions the last proposal was drawn from (None for greedy targets)."""


class DraftProposer:
    """Proposes with ``runner``'s model over ``blocks`` (its own pool, prefix caching off)."""

    def __init__(
        self, runner: ModelRunner, blocks: KVBlocks, num_speculative_tokens: int, *, seed: int
    ) -> None:
        self.runner = runner
        self.blocks = blocks
        self.num_speculative_tokens = num_speculative_tokens
        self.seed = seed
        self.mirrors: dict[int, _Mirror] = {}

    def proposal_probs(self, seq: Sequence) -> torch.Tensor | None:
        mirror = self.mirrors.get(seq.seq_id)
        return None if mirror is None else mirror.probs

    def propose(self, requests: list[tuple[Sequence, int]]) -> list[list[int]]:
        self._release_finished()
        proposals: list[list[int]] = [[] for _ in requests]
        probs: list[list[torch.Tensor]] = [[] for _ in requests]
        live = [i for i, (target, _) in enumerate(requests) if self._sync(target)]
        while live:
            batch, ran = [], []
            for i in live:
                seq = self.mirrors[requests[i][0].seq_id].seq
                num_new = seq.num_tokens - seq.num_computed_tokens
                if not self.blocks.can_append(seq, num_new):
                    continue  # the draft pool is full: this one proposes what it has
                self.blocks.append_slots(seq, num_new)
                batch.append(ScheduledSeq(seq, num_new))
                ran.append(i)
            if not batch:
                break
            logits = self.runner.run(batch)
            for row, (i, item) in enumerate(zip(ran, batch, strict=True)):
                mirror = self.mirrors[requests[i][0].seq_id]
                token, dist = self._draw(mirror, logits[row])
                item.seq.num_computed_tokens += item.num_new_tokens
                item.seq.token_ids.append(token)
                proposals[i].append(token)
                if dist is not None:
                    probs[i].append(dist)
            live = [i for i in ran if len(proposals[i]) < requests[i][1]]
        for (target, _), rows in zip(requests, probs, strict=True):
            if target.seq_id in self.mirrors:
                self.mirrors[target.seq_id].probs = torch.stack(rows) if rows else None
        return proposals

    def _draw(self, mirror: _Mirror, logits: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """The draft's next token for mirror's target: its argmax for greedy targets, else a draw from
        its distribution under the target's temperature, top-k, top-p and min-p."""
        if mirror.target.params.is_greedy:
            return int(logits.argmax()), None
        dist = masked_probs(logits.unsqueeze(0).float(), [mirror.target])[0]
        return int(draw(dist, mirror.generator)), dist

    def _sync(self, target: Sequence) -> bool:
        """Bring target's mirror to its tokens (creating it, with blocks for its prompt); False when the
        draft pool cannot hold it."""
        mirror = self.mirrors.get(target.seq_id)
        if mirror is None:
            seq = Sequence(
                seq_id=target.seq_id,
                request_id=target.request_id,
                token_ids=list(target.token_ids),
                params=target.params,
                arrival=target.arrival,
                index=target.index,
            )
            num_new = seq.num_tokens
            if not self.blocks.can_ever_fit(seq) or not self.blocks.can_allocate(seq, [], num_new):
                return False
            self.blocks.allocate(seq, [], 0)
            generator = None
            if not target.params.is_greedy:
                generator = torch.Generator(device=self.runner.device).manual_seed(self.seed + target.seq_id)
            self.mirrors[target.seq_id] = _Mirror(target, seq, seq.num_tokens, generator)
            return True
        seq, agreed = mirror.seq, mirror.num_synced
        limit = min(seq.num_tokens, target.num_tokens)
        while agreed < limit and seq.token_ids[agreed] == target.token_ids[agreed]:
            agreed += 1
        seq.num_computed_tokens = min(seq.num_computed_tokens, agreed)
        seq.token_ids = list(target.token_ids)
        mirror.num_synced = target.num_tokens
        return self.blocks.can_ever_fit(seq)

    def _release_finished(self) -> None:
        """Free the mirrors of targets that finished (their blocks go back to the draft pool)."""
        for seq_id, mirror in list(self.mirrors.items()):
            if mirror.target.is_finished:
                self.blocks.free(mirror.seq)
                del self.mirrors[seq_id]
