"""The prefix cache's key for one full KV block: a chained digest plus the exact tokens and salt.

The cache looks a block up in a dict keyed by ``BlockHash``, and a dict compares whole keys on a hit, so
two blocks are shared only when their token ids and cache salts are equal and their digests (BLAKE2b-256
chained over every earlier block, the salt first) are. A 64-bit hash alone could serve another prompt's
or another tenant's KV on a collision; here a wrong hit needs a BLAKE2b collision on identical tokens.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import NamedTuple

DIGEST_SIZE = 32
"""Bytes of each block digest (BLAKE2b-256)."""


class BlockHash(NamedTuple):
    """The prefix-cache key of one full block of a sequence."""

    digest: bytes
    """BLAKE2b over the parent block's digest (the salt's for the first block) and this block's tokens."""
    token_ids: tuple[int, ...]
    """This block's tokens, compared exactly on every cache hit."""
    cache_salt: str | None
    """The request's tenant salt, compared exactly: tenants never share a block by hash alone."""


def root_digest(cache_salt: str | None) -> bytes:
    """The digest the first block of a sequence chains from."""
    return b"" if cache_salt is None else block_digest(b"salt", cache_salt.encode())


def block_digest(parent: bytes, data: bytes) -> bytes:
    """BLAKE2b-256 of a parent digest and a block's packed token ids (the one place to swap the hash)."""
    return hashlib.blake2b(parent + data, digest_size=DIGEST_SIZE).digest()


def hash_block(parent: bytes, token_ids: list[int], cache_salt: str | None) -> BlockHash:
    """The key of the block holding ``token_ids`` after the prefix that ``parent`` digests."""
    # uint32 packing: token ids are validated to [0, vocab_size) and 4 bytes hash faster than 8
    digest = block_digest(parent, array("I", token_ids).tobytes())
    return BlockHash(digest, tuple(token_ids), cache_salt)
