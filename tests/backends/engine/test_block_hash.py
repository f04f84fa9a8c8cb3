"""BlockHash: a chained BLAKE2b digest plus the exact tokens and salt of one full block."""

from __future__ import annotations

from backends.engine.block_hash import DIGEST_SIZE, hash_block, root_digest


def test_key_carries_the_exact_tokens_and_salt() -> None:
    key = hash_block(root_digest("tenant-a"), [1, 2, 3, 4], "tenant-a")
    assert key.token_ids == (1, 2, 3, 4) and key.cache_salt == "tenant-a"
    assert len(key.digest) == DIGEST_SIZE
    assert key == hash_block(root_digest("tenant-a"), [1, 2, 3, 4], "tenant-a")


def test_digest_covers_parent_tokens_and_salt() -> None:
    root = root_digest(None)
    base = hash_block(root, [1, 2, 3, 4], None).digest
    assert hash_block(root, [1, 2, 3, 5], None).digest != base
    assert hash_block(root_digest("t"), [1, 2, 3, 4], None).digest != base
    assert root_digest(None) != root_digest("") != root_digest("t")
    # the same block after a different first block is another key: its KV saw another prefix
    after_a = hash_block(hash_block(root, [9, 9, 9, 9], None).digest, [5, 6, 7, 8], None)
    after_b = hash_block(hash_block(root, [8, 8, 8, 8], None).digest, [5, 6, 7, 8], None)
    assert after_a != after_b and after_a.token_ids == after_b.token_ids


def test_large_token_ids_pack_without_aliasing() -> None:
    root = root_digest(None)
    # 256 must not pack like (0, 1) or any byte-level neighbour
    assert hash_block(root, [256, 0], None).digest != hash_block(root, [0, 1], None).digest
    assert hash_block(root, [2**32 - 1], None).digest != hash_block(root, [2**31], None).digest
