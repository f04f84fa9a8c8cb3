"""``BackgroundShare``: what one step gives sequences of a worse priority class than the best one
running or waiting (batch lines beside interactive requests).

While a better class runs or waits, worse classes' prompts share ``prefill_tokens`` a step. While a
better class runs, at most ``decode_seqs`` worse-class decodes join its steps: the earliest-arrived,
so each finishes in turn and none starves behind later ones; the others sit the step out and keep
their blocks. With one class nothing is capped, and 0 caps nothing. On a CPU every row and token
costs a step its share of the cores, so the engine caps both there (``EngineConfig.background_on``).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.engine.sequence import Sequence


@dataclass(frozen=True)
class BackgroundLimits:
    prefill_tokens: int = 0
    """Prompt tokens a step computes, all together, for worse classes (0: no cap)."""
    decode_seqs: int = 0
    """Worse-class decodes in a step a better class decodes in (0: no cap)."""


class BackgroundShare:
    """One step's share for worse classes: ``start_step`` each step, then ``grant`` each item."""

    def __init__(self, limits: BackgroundLimits) -> None:
        self.limits = limits
        self.best_class = 0
        self._decode_class = 0
        self._tokens_left: int | None = None
        self._decodes_left: int | None = None

    def start_step(self, running: list[Sequence], waiting: list[Sequence]) -> None:
        """Read the classes present (``running`` and ``waiting`` sorted best class first)."""
        queues = [q for q in (running, waiting) if q]
        self.best_class = min((q[0].priority for q in queues), default=0)
        is_mixed = any(q[-1].priority > self.best_class for q in queues)
        runs_better = bool(running) and running[0].priority < running[-1].priority
        tokens, seqs = self.limits.prefill_tokens, self.limits.decode_seqs
        self._tokens_left = tokens if tokens and is_mixed else None
        self._decodes_left = seqs if seqs and runs_better else None
        self._decode_class = running[0].priority if running else 0  # the best class decoding

    def grant(self, seq: Sequence, num_new: int) -> int:
        """``num_new``, or what is left of this step's share when ``seq`` is of a worse class (0: it sits
        the step out)."""
        if not seq.has_prompt_left:  # a decode
            if self._decodes_left is None or seq.priority <= self._decode_class:
                return num_new
            if self._decodes_left == 0:
                return 0
            self._decodes_left -= 1
            return num_new
        if self._tokens_left is None or seq.priority <= self.best_class:
            return num_new
        num_new = min(num_new, self._tokens_left)
        self._tokens_left -= num_new
        return num_new
