"""Continuous batching: which sequences run this step, and how many of their tokens.

Every step gets a token budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``).
Running sequences go first (a decode costs one token, an unfinished prefill its next chunk), then
waiting ones in (priority, arrival) order. When blocks run out, the lowest-priority running sequence is
preempted by recompute: its blocks are freed and it waits again (its prefix is usually still cached).
When the pool frees what a sliding window has passed, a sequence may outgrow the pool: only the blocks
its window reads count, and a chunk is cut to what the whole pool could hold at once.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from backends.engine.kv_groups import KVBlocks
from backends.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int

    @property
    def is_last_chunk(self) -> bool:
        """This step computes the sequence's last pending token, so it samples one."""
        return self.seq.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    """Sequences the scheduler ended itself (they can never fit: finish_reason "length")."""

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)


class Scheduler:
    """FCFS (with optional priority) scheduler over the KV blocks (one ``BlockManager``, or ``KVGroups``
    whose every call covers both groups)."""

    def __init__(self, block_manager: KVBlocks, *, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[Sequence] = []  # sorted by sort_key
        self.running: list[Sequence] = []  # sorted by sort_key
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)

    def add_running(self, seq: Sequence) -> None:
        """Admit a sequence that already holds blocks (a forked completion)."""
        seq.status = SequenceStatus.RUNNING
        bisect.insort(self.running, seq, key=lambda s: s.sort_key)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def live_seqs(self) -> list[Sequence]:
        return self.running + self.waiting

    def finish(self, seq: Sequence, reason: str) -> None:
        """End seq (any state) and free its blocks at once."""
        if seq.is_finished:
            return
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        bm = self.block_manager
        preempted = False
        # running first: decodes and unfinished prefill chunks
        for seq in list(self.running):
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            if not bm.can_ever_fit(seq):
                self.finish(seq, "length")  # grew past the whole pool: it can never fit
                out.finished.append(seq)
                continue
            start = seq.num_computed_tokens
            num_new = min(seq.num_tokens - start, budget, bm.max_new_tokens(seq, start))
            while not bm.can_append(seq, num_new):
                victim = self.running[-1]
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                continue
            bm.append_slots(seq, num_new)
            out.scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        # then waiting ones, unless this step already had to preempt
        while self.waiting and budget > 0 and not preempted and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not bm.can_ever_fit(seq):
                self.finish(seq, "length")
                out.finished.append(seq)
                continue
            computed = bm.get_computed_blocks(seq)
            start = len(computed) * bm.block_size
            num_new = min(seq.num_tokens - start, budget, bm.max_new_tokens(seq, start))
            if not bm.can_allocate(seq, computed, num_new):
                break
            self.waiting.pop(0)
            bm.allocate(seq, computed, num_new)
            seq.status = SequenceStatus.RUNNING
            bisect.insort(self.running, seq, key=lambda s: s.sort_key)
            out.scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        return out

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)
