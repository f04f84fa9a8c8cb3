"""One token sequence: a prompt plus the tokens generated so far, and where its KV lives."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.engine.block_hash import BlockHash, hash_block, root_digest
from backends.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from backends.engine.outputs import Logprob
    from backends.engine.structured_output.matcher import SequenceGrammar


FREED_BLOCK = -1
"""A block-table entry whose block the sliding window has passed and the pool took back: the table keeps
its length, so position p still lives in ``block_table[p // block_size]`` for every p a query reads."""


@dataclass(eq=False, slots=True)
class GroupBlocks:
    """A sequence's blocks in a second KV group (the sliding layers' pool when a model mixes sliding and
    full layers): the same three fields the ``Sequence`` itself carries for the first group."""

    block_table: list[int] = field(default_factory=list)
    num_freed_blocks: int = 0
    num_hashed_blocks: int = 0


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """A prompt plus its completion. ``n > 1`` requests own one Sequence per completion.

    ``num_computed_tokens`` counts the tokens whose K/V are in the cache; the scheduler hands the rest
    (a prefill chunk, or the one newest token of a decode) to the model runner.
    """

    seq_id: int
    request_id: str
    token_ids: list[int]
    params: SamplingParams
    arrival: int
    """Admission order; with ``priority`` it orders the queues (lower runs first)."""
    index: int = 0
    """Which of the request's n completions this is."""
    priority: int = 0
    cache_salt: str | None = None
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    """Prompt tokens found in the prefix cache at first admission."""
    num_hashed_blocks: int = 0
    """Leading blocks of block_table already registered in the prefix cache."""
    block_table: list[int] = field(default_factory=list)
    num_freed_blocks: int = 0
    """Leading entries of block_table that are ``FREED_BLOCK`` (a sliding window no longer reads them)."""
    sliding_blocks: GroupBlocks = field(default_factory=GroupBlocks)
    """Its table in the sliding layers' pool when the KV cache has two groups (unused with one)."""
    block_hashes: list[BlockHash] = field(default_factory=list)
    """Prefix-cache key of every full block of token_ids, computed lazily."""
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    """The stop string or ``stop_token_ids`` id that ended it (vLLM's ``stop_reason``); None for eos,
    lengths, and while it runs."""
    error: str | None = None
    generator: torch.Generator | None = None
    logprobs: list[tuple[Logprob, list[Logprob]]] | None = None
    text: str = ""
    detokenizer: Any = None
    """The ``detokenizer.IncrementalDetokenizer`` the engine attaches."""
    num_preemptions: int = 0
    grammar: SequenceGrammar | None = None
    """Where its output stands in the request's grammar (structured outputs); None: free text. The
    scheduler advances it with every token it appends."""

    def __post_init__(self) -> None:
        if not self.num_prompt_tokens:
            self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def has_prompt_left(self) -> bool:
        """Tokens beyond the last one are still to compute: a prefill (or a recompute), not a decode."""
        return len(self.token_ids) - self.num_computed_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.priority, self.arrival, self.index)

    def full_block_hashes(self, block_size: int) -> list[BlockHash]:
        """Keys of the full blocks of token_ids, each digest chained to its parent's (and the salt)."""
        num_full = self.num_tokens // block_size
        hashes = self.block_hashes
        while len(hashes) < num_full:
            i = len(hashes)
            parent = hashes[-1].digest if hashes else root_digest(self.cache_salt)
            block = self.token_ids[i * block_size : (i + 1) * block_size]
            hashes.append(hash_block(parent, block, self.cache_salt))
        return hashes[:num_full]
