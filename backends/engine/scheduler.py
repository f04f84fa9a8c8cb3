"""Continuous batching: which sequences run this step, and how many of their tokens.

Every step gets a token budget (``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``).
Running sequences go first (a decode costs one token, an unfinished prefill its next chunk), then
waiting ones in (priority, arrival) order. ``long_prefill_token_threshold`` caps one sequence's chunk,
as vLLM's does: a long prompt then prefills over several steps and leaves each step's budget to the
decodes and short prompts beside it, whose first token would otherwise wait for its whole prefill.
A prompt of a better priority class computes in steps of its
own: while one waits or prefills, running sequences of worse classes sit those steps out (they keep
their blocks) and no prompt of a worse class starts beside it, so an interactive request's first token
waits on no batch work; they run again in the next step without one, and their prompts share
a small share of each step while a better class runs or waits (``background.BackgroundShare``: a
few prompt tokens, and a few decodes beside a better class's). When blocks run out, the
lowest-priority running sequence is preempted by recompute: its blocks are freed and it waits again
(its prefix is usually still cached).
When the pool frees what a sliding window has passed, a sequence may outgrow the pool: only the blocks
its window reads count, and a chunk is cut to what the whole pool could hold at once.

After the forward pass, ``postprocess`` books the step: computed tokens advance and full blocks are
cached, a request of n > 1 forks its other completions off its first one once its prompt is computed,
each sampled token is appended and checked against the stop conditions (its text and the stop strings are
``detokenizer.append_text``'s), and a sequence that stops is finished (its blocks freed at once).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from backends.engine.background import BackgroundLimits, BackgroundShare
from backends.engine.detokenizer import append_text
from backends.engine.kv_groups import KVBlocks
from backends.engine.outputs import Logprob
from backends.engine.sequence import Sequence, SequenceStatus

if TYPE_CHECKING:
    import torch

    from backends.engine.sampler import SampleResult


@dataclass(frozen=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int
    """Tokens computed this step: the sequence's pending ones, then ``spec_token_ids``."""
    spec_token_ids: tuple[int, ...] = ()
    """Proposed tokens a speculative step verifies after the sequence's last one (a decode only)."""

    @property
    def is_last_chunk(self) -> bool:
        """This step computes the sequence's last pending token, so it samples one."""
        num_pending = self.num_new_tokens - len(self.spec_token_ids)
        return self.seq.num_computed_tokens + num_pending == self.seq.num_tokens

    @property
    def num_sample_rows(self) -> int:
        """Logit rows this item samples from: one per proposed token plus one (none before the last chunk)."""
        return 1 + len(self.spec_token_ids) if self.is_last_chunk else 0


class Proposer(Protocol):
    """Speculative decoding's drafter (``spec_decode/``): proposes the next tokens of decoding sequences."""

    num_speculative_tokens: int

    def propose(self, requests: list[tuple[Sequence, int]]) -> list[list[int]]:
        """At most ``max_tokens`` proposed tokens for each (sequence, max_tokens), in order; [] for none."""
        ...

    def proposal_probs(self, seq: Sequence) -> torch.Tensor | None:
        """[k, vocab] the distributions seq's last proposal was drawn from; None: point masses."""
        ...


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

    def __init__(
        self,
        block_manager: KVBlocks,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        eos_token_id: int | None = None,
        max_model_len: int | None = None,
        token_text: Callable[[int], str] = str,
        proposer: Proposer | None = None,
        speculative_max_batch: int | None = None,
        background: BackgroundLimits = BackgroundLimits(),
        long_prefill_token_threshold: int = 0,
    ) -> None:
        """``eos_token_id`` and ``max_model_len`` stop a sequence (None: never); ``token_text`` is one
        token's text, for logprobs. ``proposer`` turns on speculative decoding for decodes, in steps with
        fewer than ``speculative_max_batch`` running sequences (None: any). ``background`` caps what a
        step gives sequences of worse priority classes than the best one present (none: no caps);
        ``long_prefill_token_threshold`` the prompt tokens one sequence computes in a step (0: no cap)."""
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.eos_token_id = eos_token_id
        self.max_model_len = max_model_len
        self.token_text = token_text
        self.proposer = proposer
        self.speculative_max_batch = speculative_max_batch
        self.background = BackgroundShare(background)
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.waiting: list[Sequence] = []  # sorted by sort_key
        self.running: list[Sequence] = []  # sorted by sort_key
        self.forks: dict[int, list[Sequence]] = {}
        """Parent seq_id -> the n - 1 completions that fork from it once its prompt is computed."""
        self.num_preemptions = 0
        self.num_generated_tokens = 0

    def add(self, seq: Sequence, *, forks: list[Sequence] | None = None) -> None:
        """Queue ``seq``; ``forks`` (its request's other completions) start from its computed prompt."""
        seq.status = SequenceStatus.WAITING
        if forks:
            self.forks[seq.seq_id] = forks
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def live_seqs(self) -> list[Sequence]:
        return self.running + self.waiting

    def finish(self, seq: Sequence, reason: str) -> None:
        """End seq (any state) and free its blocks at once."""
        if seq.is_finished:
            return
        (self.running if seq.status is SequenceStatus.RUNNING else self.waiting).remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        for child in self.forks.pop(seq.seq_id, ()):  # it ended before forking: so do its children
            child.status, child.finish_reason, child.error = SequenceStatus.FINISHED, reason, seq.error

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        self.background.start_step(self.running, self.waiting)  # worse classes' share of this step
        # running first: decodes and unfinished prefill chunks, but classes worse than a prompt's wait
        prompt_class = self._prompt_class()
        if prompt_class is None:
            now, held = list(self.running), []
        else:
            num_now = bisect.bisect_right(self.running, prompt_class, key=lambda s: s.priority)
            now, held = self.running[:num_now], self.running[num_now:]
        budget, preempted = self._schedule_running(out, now, budget)
        if self.proposer is not None and budget > 0 and not preempted:
            budget -= self._speculate(out, budget)
        # then waiting ones, unless this step already had to preempt
        num_running = len(out.scheduled)
        budget, preempted = self._admit_waiting(out, budget, preempted)
        if held and not preempted and not self._computes_prompt(out, num_running, prompt_class):
            self._schedule_running(out, held, budget)  # the prompt could not start (no room): run them
        return out

    def _prompt_class(self) -> int | None:
        """The best priority class with prompt tokens to compute, when it is better than some running
        sequence's: a prefill (or a recompute) running, or a waiting sequence with room to start."""
        if not self.running:
            return None
        worst = self.running[-1].priority
        if self.running[0].priority == worst and (not self.waiting or self.waiting[0].priority >= worst):
            return None  # one class (the usual case): nothing to hold back
        classes = [s.priority for s in self.running if s.has_prompt_left]
        if self.waiting and len(self.running) < self.max_num_seqs:
            classes.append(self.waiting[0].priority)
        best = min(classes, default=worst)
        return best if worst > best else None

    @staticmethod
    def _computes_prompt(out: SchedulerOutput, num_running: int, prompt_class: int | None) -> bool:
        """Whether this step computes prompt tokens of ``prompt_class`` or better: a sequence admitted
        from the waiting queue (after the first ``num_running`` scheduled), or a running prefill."""
        assert prompt_class is not None
        for i, item in enumerate(out.scheduled):
            seq = item.seq
            if seq.priority <= prompt_class and (i >= num_running or seq.has_prompt_left):
                return True
        return False

    def _schedule_running(self, out: SchedulerOutput, seqs: list[Sequence], budget: int) -> tuple[int, bool]:
        """Schedule running ``seqs`` (decodes and prefill chunks) in order; the budget left and whether
        blocks ran out and a sequence was preempted."""
        bm = self.block_manager
        preempted = False
        for seq in seqs:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            if not bm.can_ever_fit(seq):
                self.finish(seq, "length")  # grew past the whole pool: it can never fit
                out.finished.append(seq)
                continue
            num_new = self.background.grant(seq, self._chunk(seq, seq.num_computed_tokens, budget))
            if num_new == 0:
                continue  # a worse class's, and this step's share for them is spent
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
        return budget, preempted

    def _admit_waiting(self, out: SchedulerOutput, budget: int, preempted: bool) -> tuple[int, bool]:
        """Start waiting sequences in order while the budget, the sequence cap and blocks allow, but
        none of a worse class than a prompt this step already computes."""
        bm = self.block_manager
        prompts = [item.seq.priority for item in out.scheduled if item.seq.has_prompt_left]
        prompt_class = min(prompts, default=None)
        while self.waiting and budget > 0 and not preempted and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if prompt_class is not None and seq.priority > prompt_class:
                break  # the better prompt's step is its own: this one starts in a later step
            if not bm.can_ever_fit(seq):
                self.finish(seq, "length")
                out.finished.append(seq)
                continue
            forked = seq.num_computed_tokens > 0  # a fork: it holds its share of the parent's prompt blocks
            computed = [] if forked else bm.get_computed_blocks(seq)
            start = seq.num_computed_tokens or len(computed) * bm.block_size
            num_new = self.background.grant(seq, self._chunk(seq, start, budget))
            if num_new == 0:
                break
            if not (bm.can_append(seq, num_new) if forked else bm.can_allocate(seq, computed, num_new)):
                if self.running or not (forks := [s for s in self.waiting if s.num_computed_tokens > 0]):
                    break
                for fork in forks:  # nothing runs that would free blocks: waiting forks give theirs back
                    bm.free(fork)
                continue
            self.waiting.pop(0)
            if forked:
                bm.append_slots(seq, num_new)
            else:
                bm.allocate(seq, computed, num_new)
            prompt_class = seq.priority  # (never worse than before: waiting is in class order)
            seq.status = SequenceStatus.RUNNING
            bisect.insort(self.running, seq, key=lambda s: s.sort_key)
            out.scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        return budget, preempted

    def _chunk(self, seq: Sequence, start: int, budget: int) -> int:
        """The tokens seq may compute this step from ``start``: what is left, within the budget, the
        blocks and the long-prefill cap."""
        num_new = min(seq.num_tokens - start, budget, self.block_manager.max_new_tokens(seq, start))
        cap = self.long_prefill_token_threshold
        return min(num_new, cap) if cap else num_new

    def _speculate(self, out: SchedulerOutput, budget: int) -> int:
        """Give this step's decodes the proposer's tokens, as many as the budget, their limits and free
        blocks allow (never preempting for them); the tokens it added."""
        assert self.proposer is not None
        if self.speculative_max_batch is not None and len(self.running) >= self.speculative_max_batch:
            return 0
        bm, k = self.block_manager, self.proposer.num_speculative_tokens
        wanted: list[tuple[int, Sequence, int]] = []
        for i, item in enumerate(out.scheduled):
            seq = item.seq
            if item.num_new_tokens != 1 or not item.is_last_chunk or not self._may_speculate(seq):
                continue
            room = self._tokens_left(seq) - 1  # the verified step adds one token beyond the proposals
            start = seq.num_computed_tokens
            room = min(room, k, budget, bm.max_new_tokens(seq, start) - 1)
            if room > 0:
                wanted.append((i, seq, room))
                budget -= room
        if not wanted:
            return 0
        proposals = self.proposer.propose([(seq, room) for _, seq, room in wanted])
        added = 0
        for (i, seq, room), tokens in zip(wanted, proposals, strict=True):
            spec = tuple(tokens[:room])
            if not spec or not bm.can_append(seq, 1 + len(spec)):
                continue
            bm.append_slots(seq, 1 + len(spec))
            out.scheduled[i] = ScheduledSeq(seq, 1 + len(spec), spec)
            added += len(spec)
        return added

    @staticmethod
    def _may_speculate(seq: Sequence) -> bool:
        """A decode whose next tokens a proposal can stand in for: past its prompt (forked), without
        penalties (each depends on the tokens before it) and without logprobs."""
        p = seq.params
        return seq.num_output_tokens > 0 and not p.has_penalties and p.logprobs is None

    def _tokens_left(self, seq: Sequence) -> int:
        """Tokens seq may still generate before max_tokens or the model's length stops it."""
        left = seq.params.max_tokens - seq.num_output_tokens if seq.params.max_tokens is not None else 1 << 30
        if self.max_model_len is not None:
            left = min(left, self.max_model_len - seq.num_tokens)
        return left

    def postprocess(self, scheduled: list[ScheduledSeq], result: SampleResult | None) -> list[Sequence]:
        """Book a computed step: advance every scheduled sequence, then append the tokens ``result``
        sampled for the last chunks (in ``scheduled`` order). The sequences that sampled a token.

        A speculative item's accepted tokens are appended first and its computed tokens advance by the
        ones verified (its last token and the accepted proposals); the K/V written for the rejected
        proposals lie past ``num_computed_tokens`` and are overwritten by later steps."""
        sampling = [item for item in scheduled if item.is_last_chunk]
        for item in scheduled:
            if not item.spec_token_ids:
                self._advance(item.seq, item.num_new_tokens)
        if result is None:
            return []
        for item, tokens, lp in zip(sampling, result.token_ids, result.logprobs, strict=True):
            seq = item.seq
            self._fork(seq)
            for token in tokens:
                self._append_token(seq, token, lp)
                if seq.is_finished:
                    break
            if item.spec_token_ids and not seq.is_finished:
                self._advance(seq, len(tokens))  # its last token and the len(tokens) - 1 accepted
        return [item.seq for item in sampling]

    def _advance(self, seq: Sequence, num_computed: int) -> None:
        seq.num_computed_tokens += num_computed
        self.block_manager.cache_full_blocks(seq)
        self.block_manager.free_out_of_window(seq)  # no-op unless a window frees a pool

    def _fork(self, parent: Sequence) -> None:
        """Children share the parent's full prompt blocks and compute only the tail. They start as waiting
        sequences do, so each counts toward ``max_num_seqs`` (as each of vLLM's n child requests does)."""
        for child in self.forks.pop(parent.seq_id, ()):
            self.block_manager.fork(parent, child)
            self.add(child)

    def _append_token(
        self, seq: Sequence, token: int, lp: tuple[float, list[tuple[int, float]]] | None
    ) -> None:
        seq.token_ids.append(token)
        self.num_generated_tokens += 1
        if seq.logprobs is not None and lp is not None:
            text_of = self.token_text
            chosen = Logprob(token, lp[0], text_of(token))
            seq.logprobs.append((chosen, [Logprob(t, v, text_of(t)) for t, v in lp[1]]))
        is_eos = token == self.eos_token_id and not seq.params.ignore_eos
        stop_id = not is_eos and token in seq.params.stop_token_ids  # eos is reported as no stop id
        stop_token = is_eos or stop_id
        if seq.grammar is not None:  # structured: the grammar follows every appended token
            if not seq.grammar.accept(token):
                seq.error = f"token {token} is outside the request's grammar"
                self.finish(seq, "error")
                return
            stop_token = stop_token or seq.grammar.is_terminated  # its stop token: nothing may follow
        # its text grows either way; a stop token ends it before any stop string is looked for
        stop_string = append_text(seq, find_stop=not stop_token)
        seq.stop_reason = token if stop_id else stop_string  # what ended it, as vLLM reports it
        reason = "stop" if stop_token or stop_string is not None else self._length_reason(seq)
        if reason is not None:
            self.finish(seq, reason)

    def _length_reason(self, seq: Sequence) -> str | None:
        """ "length" when seq has reached max_tokens or the model's length, else None."""
        if seq.params.max_tokens is not None and seq.num_output_tokens >= seq.params.max_tokens:
            return "length"
        if self.max_model_len is not None and seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)
