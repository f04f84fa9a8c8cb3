"""Choose a replica by the prompt tokens it holds against the load it carries.

Each candidate scores ``hit_tokens - load_tokens * load`` (``hit_tokens``: the prompt's leading tokens
it holds, whole blocks only; ``load``: its requests in flight); the best score wins, ties going to the
lighter load, then to the earlier candidate. Both terms are prefill work in tokens, as NVIDIA Dynamo's
KV router counts them: the tokens a replica holds are tokens it need not prefill, and ``load_tokens``
is what one request in flight is worth against them (256 by default: about what a chat turn
prefills). A conversation's next turn, whose replica holds its whole history (a thousand tokens and
more), stays with that replica through several requests of extra load, for moving it means
prefilling the history again; a new conversation that only shares a system prompt (a couple of
hundred tokens) goes to a replica with one request less in flight, so conversations
spread instead of piling onto the replica that first served their system prompt. A replica whose load
is above the candidates' mean by ``max_load_factor`` and by at least ``min_load_excess`` requests is
never chosen, whatever it holds: a hot prefix must not pile every request onto one engine. When no
candidate holds a single leading block, or the best score is one that holds none, the scorer chooses
nobody (``label`` None) and the balancer's strategy decides (its ties rotate from a random place, so
gateways do not all pick alike).
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
    block_size: int = 16
    """Tokens a block of this replica's holds."""


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
    load_tokens: float = 256,
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
    most_hits = max(candidates, key=_hit_tokens)
    if most_hits.num_hits == 0:
        return KvChoice(None, f"kv:0/{most_hits.num_blocks} blocks", "miss")
    best = max(
        enumerate(eligible),
        key=lambda ic: (_hit_tokens(ic[1]) - ic[1].load * load_tokens, -ic[1].load, -ic[0]),
    )[1]
    if best.num_hits == 0:  # load outweighed every holder: the balancer spreads it (its ties rotate)
        return KvChoice(None, f"kv:0/{best.num_blocks} blocks", "override")
    outcome: Outcome = "override" if _hit_tokens(best) < _hit_tokens(most_hits) else "hit"
    return KvChoice(best.label, f"kv:{best.num_hits}/{best.num_blocks} blocks@{best.label}", outcome)


def _hit_tokens(candidate: Candidate) -> int:
    """The prompt's leading tokens the candidate holds."""
    return candidate.num_hits * candidate.block_size
