"""Which replica holds which KV blocks, keyed by the gateway's own chain hashes.

An engine names a block by its own hash (vLLM: SHA-256 or builtin hash of the parent's hash, the
block's tokens and extra keys, with a per-process seed). The index never trusts that function: it
computes its own ``chain_hash(parent_chain, token_ids)`` for each stored block, from the tokens the
event carries and the chain hash it already gave the block's parent, and keeps the engine's hash
only to follow later events (a child's parent, a removal). A prompt is looked up the same way: its
token ids cut into the replica's ``block_size`` give the chain to look up, and a replica's hits are
the number of leading blocks it holds. What else the engine hashed into a block (the event's
``extra_keys``: vLLM puts a request's cache salt on its first block) goes into the chain hash too, and
a prompt is looked up with the salt it carries to that replica: a tenant's prompt matches only the
blocks cached for its own salt, never another tenant's copy of the same tokens.

Memory is bounded per replica (``max_blocks``, least recently stored forgotten first). A replica is
forgotten as a whole (its blocks no longer count) when its engine clears its cache, when a gap in
its events cannot be filled, when its events stop for ``stale_after_s``, or when it restarts.
Only blocks in GPU memory count (``medium`` None or ``GPU``): an offloaded copy is slower to use;
and only the first KV group's (``group_idx`` None or 0, the full-attention layers).
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from gateway.kv_routing.events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch

__all__ = ["BlockIndex", "PromptChain", "ReplicaKey", "chain_hash", "prompt_chain"]

ReplicaKey = tuple[str, str]
"""(pool, replica label): labels are unique within a pool only."""

_ROOT = b"\x00" * 16
_GPU_MEDIA = (None, "GPU")
_PREFIX_GROUPS = (None, 0)  # the full-attention layers' blocks; a hybrid model's sliding ones follow them


def chain_hash(
    parent: bytes | None, token_ids: Sequence[int], extra_keys: tuple[Hashable, ...] | None = None
) -> bytes:
    """The gateway's name of a block: BLAKE2b-128 of its parent's chain hash, its token ids and, when
    the engine hashed more than tokens into it (``extra_keys``: a cache salt, a LoRA), those too."""
    digest = hashlib.blake2b(parent or _ROOT, digest_size=16)
    digest.update(array("q", token_ids).tobytes())
    if extra_keys:
        digest.update(_extra_bytes(extra_keys))
    return digest.digest()


def _extra_bytes(extra_keys: tuple[Hashable, ...]) -> bytes:
    return b"\xff" + msgspec.msgpack.encode(extra_keys)


class PromptChain:
    """A prompt's chain hashes at one block size, computed only as far as lookups read: a replica that
    misses the first block costs one hash, not one per block of a long prompt.

    ``cache_salt``: the salt the request carries to this replica (the tenant's), which the engine
    folds into the first block as vLLM does (``extra_keys`` ``("salt",)``): only blocks stored for
    that salt match, so one tenant's prompt never counts another's cached copy as a hit."""

    def __init__(self, token_ids: Sequence[int], block_size: int, cache_salt: str | None = None) -> None:
        self.num_blocks = len(token_ids) // block_size  # a partial last block is never cached
        self._bytes = memoryview(array("q", token_ids[: self.num_blocks * block_size]).tobytes())
        self._step = block_size * 8
        self._first_extra = _extra_bytes((cache_salt,)) if cache_salt else b""
        self._hashes: list[bytes] = []

    def __len__(self) -> int:
        return self.num_blocks

    def __getitem__(self, i: int) -> bytes:
        """The chain hash of block ``i`` (from 0; IndexError past the last whole block)."""
        hashes, step = self._hashes, self._step
        if not 0 <= i < self.num_blocks:
            raise IndexError(i)
        while len(hashes) <= i:
            n = len(hashes)
            digest = hashlib.blake2b(hashes[-1] if hashes else _ROOT, digest_size=16)
            digest.update(self._bytes[n * step : (n + 1) * step])  # == chain_hash(parent, block[, salt])
            if not n and self._first_extra:
                digest.update(self._first_extra)
            hashes.append(digest.digest())
        return hashes[i]


def prompt_chain(token_ids: Sequence[int], block_size: int, cache_salt: str | None = None) -> list[bytes]:
    """Every chain hash of the prompt's whole blocks, in order."""
    chain = PromptChain(token_ids, block_size, cache_salt)
    return [chain[i] for i in range(len(chain))]


@dataclass(slots=True)
class _Replica:
    """One replica's blocks: engine hash -> (chain hash, parent's engine hash), least recently stored
    or used first; chain hash -> how many engine blocks have it (two salts can give one chain)."""

    max_blocks: int
    stale_after_s: float
    last_event_at: float
    block_size: int | None = None
    chain_of: OrderedDict[Hashable, tuple[bytes, Hashable | None]] = field(default_factory=OrderedDict)
    held: dict[bytes, int] = field(default_factory=dict)

    def store(self, engine_hash: Hashable, chain: bytes, parent: Hashable | None) -> None:
        old = self.chain_of.pop(engine_hash, None)
        if old is not None:
            self._unhold(old[0])
        self.chain_of[engine_hash] = (chain, parent)
        self.held[chain] = self.held.get(chain, 0) + 1
        while len(self.chain_of) > self.max_blocks:  # the bound: oldest stored goes first
            _, (evicted, _) = self.chain_of.popitem(last=False)
            self._unhold(evicted)

    def refresh(self, engine_hash: Hashable | None) -> None:
        """A child of ``engine_hash`` was stored: it and its ancestors are in use, keep them longest."""
        for _ in range(len(self.chain_of)):  # a chain has no cycle; the bound guards a corrupt one
            entry = self.chain_of.get(engine_hash) if engine_hash is not None else None
            if entry is None:
                return
            self.chain_of.move_to_end(engine_hash)
            engine_hash = entry[1]

    def remove(self, engine_hash: Hashable) -> None:
        entry = self.chain_of.pop(engine_hash, None)
        if entry is not None:
            self._unhold(entry[0])

    def clear(self) -> None:
        self.chain_of.clear()
        self.held.clear()

    def _unhold(self, chain: bytes) -> None:
        count = self.held[chain] - 1
        if count:
            self.held[chain] = count
        else:
            del self.held[chain]


class BlockIndex:
    """Replica -> the blocks it holds, fed by event batches, asked for a prompt's leading hits."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._replicas: dict[ReplicaKey, _Replica] = {}
        self.num_forgotten = 0
        """Times a replica's blocks were dropped as a whole (clear, gap, stale, restart)."""

    def apply(
        self, key: ReplicaKey, batch: EventBatch, *, max_blocks: int = 65_536, stale_after_s: float = 300.0
    ) -> None:
        """Apply one batch of ``key``'s events, in order; the replica counts as live from now."""
        replica = self._replicas.get(key)
        now = self.clock()
        if replica is None:
            replica = self._replicas[key] = _Replica(max_blocks, stale_after_s, now)
        replica.max_blocks, replica.stale_after_s, replica.last_event_at = max_blocks, stale_after_s, now
        for event in batch.events:
            if isinstance(event, BlockStored):
                if event.medium in _GPU_MEDIA and event.group_idx in _PREFIX_GROUPS:
                    self._store(replica, event)
            elif isinstance(event, BlockRemoved):
                if event.medium in _GPU_MEDIA and event.group_idx in _PREFIX_GROUPS:
                    for engine_hash in event.block_hashes:
                        replica.remove(engine_hash)
            elif isinstance(event, AllBlocksCleared):
                replica.clear()

    def touch(self, key: ReplicaKey) -> None:
        """Events of ``key`` arrived (even none that change blocks): it is not stale."""
        replica = self._replicas.get(key)
        if replica is not None:
            replica.last_event_at = self.clock()

    def forget(self, key: ReplicaKey) -> None:
        """Drop everything known of ``key``: it counts as having no events until new ones arrive."""
        if self._replicas.pop(key, None) is not None:
            self.num_forgotten += 1

    def retain(self, keys: Iterable[ReplicaKey]) -> None:
        """Forget every replica not in ``keys`` (the policy dropped it)."""
        wanted = set(keys)
        for key in [k for k in self._replicas if k not in wanted]:
            del self._replicas[key]

    def is_live(self, key: ReplicaKey) -> bool:
        """Events of ``key`` flow: it has sent some within its ``stale_after_s`` (else it is forgotten)."""
        replica = self._replicas.get(key)
        if replica is None:
            return False
        if self.clock() - replica.last_event_at > replica.stale_after_s:
            self.forget(key)
            return False
        return True

    def block_size(self, key: ReplicaKey) -> int | None:
        """The replica's block size, once one of its stored events told it."""
        replica = self._replicas.get(key)
        return replica.block_size if replica is not None else None

    def num_blocks(self, key: ReplicaKey) -> int:
        replica = self._replicas.get(key)
        return len(replica.chain_of) if replica is not None else 0

    def num_hits(self, key: ReplicaKey, chain: PromptChain | Sequence[bytes]) -> int:
        """How many of ``chain``'s leading blocks ``key`` holds."""
        replica = self._replicas.get(key)
        if replica is None:
            return 0
        held = replica.held
        for i in range(len(chain)):
            if chain[i] not in held:
                return i
        return len(chain)

    def _store(self, replica: _Replica, event: BlockStored) -> None:
        size = event.block_size
        replica.block_size = size
        parent: bytes | None = None
        parent_hash = event.parent_block_hash
        if parent_hash is not None:
            entry = replica.chain_of.get(parent_hash)
            if entry is None:  # its prefix is unknown here (missed, or bounded out): unreachable
                return
            parent = entry[0]
            replica.refresh(parent_hash)
        tokens, extras = event.token_ids, event.extra_keys or ()
        for i, engine_hash in enumerate(event.block_hashes):
            block_tokens = tokens[i * size : (i + 1) * size]
            if len(block_tokens) < size:  # fewer tokens than blocks: the rest cannot be named
                return
            parent = chain_hash(parent, block_tokens, extras[i] if i < len(extras) else None)
            replica.store(engine_hash, parent, parent_hash)
            parent_hash = engine_hash
