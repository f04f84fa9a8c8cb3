"""Choose a replica by the prompt blocks it holds against the load it carries.

Each candidate scores ``hit_weight * hits / blocks - load_weight * load`` (``hits / blocks``: the share
of the prompt's whole blocks it holds at its head; ``load``: its requests in flight); the best score
wins, ties going to the lighter load, then to the earlier candidate. The share, not the count, is
what weighs against load, as llm-d's prefix scorer does: a conversation's next turn (nearly all of
its prompt held) stays with its replica through a few requests of load, while a new conversation
that only shares a system prompt (a third of its prompt, say) goes to a replica with one request
less in flight, so conversations spread instead of piling onto the replica that first served their
system prompt, where they would stay. A replica whose load is above the candidates' mean by
``max_load_factor`` and by at least ``min_load_excess`` requests is never chosen, whatever it holds:
a hot prefix must not pile every request onto one engine. When no candidate holds a single leading
block, or the best score is one that holds none, the scorer chooses nobody (``label`` None) and the
balancer's strategy decides (its ties rotate from a random place, so gateways do not all pick alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Candidate", "KvChoice", "Outcome", "choose"]

Outcome = Literal["hit", "override", "miss"]
"""``hit``: the chosen replica holds blocks; ``override``: load outweighed blocks (the best holder was
too loaded, or its score lower); ``miss``: nobody holds a leading block."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One replica as the scorer sees it."""

    label: str
    load: float
    """Requests in flight (the balancer's load)."""
    num_hits: int
    """Leading prompt blocks it holds."""
    num_blocks: int
    """The prompt's whole blocks at this replica's block size."""


@dataclass(frozen=True, slots=True)
class KvChoice:
    """The scorer's pick: ``label`` (None: let the balancer choose), the reason a response carries
    (``kv:8/10 blocks@replica-b``) and the outcome a metric counts."""

    label: str | None
    reason: str
    outcome: Outcome


def choose(
    candidates: Sequence[Candidate],
    *,
    hit_weight: float = 1.0,
    load_weight: float = 0.4,
    max_load_factor: float = 1.5,
    min_load_excess: float = 4.0,
) -> KvChoice:
    """The best candidate by blocks held and load (ValueError when there is none)."""
    if not candidates:
        raise ValueError("choose needs at least one candidate")
    mean = sum(c.load for c in candidates) / len(candidates)
    eligible = [
        c for c in candidates if not (c.load > mean * max_load_factor and c.load >= mean + min_load_excess)
    ]  # never empty: the least loaded is at most the mean
    most_hits = max(candidates, key=lambda c: c.num_hits)
    if most_hits.num_hits == 0:
        return KvChoice(None, f"kv:0/{most_hits.num_blocks} blocks", "miss")
    best = max(
        enumerate(eligible),
        key=lambda ic: (_share(ic[1]) * hit_weight - ic[1].load * load_weight, -ic[1].load, -ic[0]),
    )[1]
    if best.num_hits == 0:  # load outweighed every holder: the balancer spreads it (its ties rotate)
        return KvChoice(None, f"kv:0/{best.num_blocks} blocks", "override")
    outcome: Outcome = "override" if best.num_hits < most_hits.num_hits else "hit"
    return KvChoice(best.label, f"kv:{best.num_hits}/{best.num_blocks} blocks@{best.label}", outcome)


def _share(candidate: Candidate) -> float:
    return candidate.num_hits / candidate.num_blocks if candidate.num_blocks else 0.0
