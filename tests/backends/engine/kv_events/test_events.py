"""The event structs: MessagePack round trips, and the exact shape vLLM's subscribers decode."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import msgspec
import pytest

from backends.engine.block_hash import BlockHash, hash_block, root_digest
from backends.engine.kv_events.events import (
    AllBlocksCleared,
    KVEventBatch,
    block_removed,
    block_stored,
    decode_batch,
    encode_batch,
    external_block_hash,
)
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence


def _chain(*blocks: list[int]) -> list[BlockHash]:
    hashes: list[BlockHash] = []
    parent = root_digest(None)
    for tokens in blocks:
        h = hash_block(parent, tokens, None)
        hashes.append(h)
        parent = h.digest
    return hashes


def test_batch_round_trips() -> None:
    h0, h1, h2 = _chain([1, 2], [3, 4], [5, 6])
    batch = KVEventBatch(
        12.5,
        [
            block_stored([h1, h2], h0, 2, group_idx=1, sliding_window=8),
            block_removed(h0, group_idx=0),
            AllBlocksCleared(),
        ],
        data_parallel_rank=0,
    )
    assert decode_batch(encode_batch(batch)) == batch


def test_wire_shape_is_vllms_tagged_maps() -> None:
    """Plain msgpack, no types of ours: maps tagged by "type", vLLM's field names, defaults left out."""
    h0, h1 = _chain([1, 2], [3, 4])
    batch = KVEventBatch(
        1.0,
        [block_stored([h0, h1], None, 2, group_idx=0, sliding_window=None), block_removed(h1, group_idx=0)],
        data_parallel_rank=0,
    )
    raw = msgpack.unpackb(encode_batch(batch))
    assert raw == {
        "ts": 1.0,
        "events": [
            {
                "type": "BlockStored",
                "block_hashes": [external_block_hash(h0), external_block_hash(h1)],
                "parent_block_hash": None,
                "token_ids": [1, 2, 3, 4],
                "block_size": 2,
                "lora_id": None,
                "medium": "GPU",
                "lora_name": None,
                "group_idx": 0,
                "kv_cache_spec_kind": "full_attention",
            },
            {
                "type": "BlockRemoved",
                "block_hashes": [external_block_hash(h1)],
                "medium": "GPU",
                "group_idx": 0,
            },
        ],
        "data_parallel_rank": 0,
    }
    assert msgpack.unpackb(encode_batch(KVEventBatch(2.0, [AllBlocksCleared()]))) == {
        "ts": 2.0,
        "events": [{"type": "AllBlocksCleared"}],
    }


# A subscriber's own Structs: vLLM's declarations, written independently of ours.
class _Event(msgspec.Struct, tag=True, omit_defaults=True):
    pass


class _Stored(_Event, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class _Batch(msgspec.Struct, omit_defaults=True):
    ts: float
    events: list[_Stored]
    data_parallel_rank: int | None = None


def test_a_vllm_shaped_decoder_reads_our_payload() -> None:
    """A subscriber's own Structs decode our bytes."""
    h0, h1 = _chain([7, 8], [9, 10])
    payload = encode_batch(KVEventBatch(3.0, [block_stored([h1], h0, 2, group_idx=0, sliding_window=None)]))
    got = msgspec.msgpack.decode(payload, type=_Batch)
    assert got.events[0].parent_block_hash == external_block_hash(h0)
    assert got.events[0].token_ids == [9, 10]


def test_a_salted_sequences_first_block_carries_its_salt_in_extra_keys() -> None:
    """vLLM's per-block ``extra_keys``: the cache salt on the sequence's first block only."""
    parent = root_digest("tenant-a")
    h0 = hash_block(parent, [1, 2], "tenant-a")
    h1 = hash_block(h0.digest, [3, 4], "tenant-a")
    h2 = hash_block(h1.digest, [5, 6], "tenant-a")
    first = block_stored([h0, h1], None, 2, group_idx=0, sliding_window=None)
    assert first.extra_keys == [("tenant-a",), None]
    later = block_stored([h2], h1, 2, group_idx=0, sliding_window=None)  # its salt is in its parent's
    assert later.extra_keys is None
    payload = encode_batch(KVEventBatch(1.0, [first, later]))
    got = msgspec.msgpack.decode(payload, type=_Batch)  # a vLLM-shaped subscriber reads it
    assert got.events[0].extra_keys == [["tenant-a"], None] and got.events[1].extra_keys is None
    unsalted = block_stored(_chain([1, 2]), None, 2, group_idx=0, sliding_window=None)
    assert "extra_keys" not in msgpack.unpackb(encode_batch(KVEventBatch(1.0, [unsalted])))["events"][0]


def test_external_hash_is_an_unsigned_64_bit_fold_of_the_digest() -> None:
    (h,) = _chain([1, 2, 3])
    value = external_block_hash(h)
    assert 0 <= value < 2**64
    assert value == int.from_bytes(h.digest[-8:], "big")
    assert external_block_hash(hash_block(root_digest(None), [1, 2, 3], None)) == value  # stable


def test_junk_payload_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_batch(b"\x93junk")


def _documented_recipe() -> Any:
    """docs/engine.md's ``block_hashes`` (what a router runs), executed from the page itself."""
    page = (Path(__file__).resolve().parents[4] / "docs" / "engine.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "def block_hashes(" in b]
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    return namespace["block_hashes"]


@pytest.mark.parametrize("salt", [None, "tenant-a"])
def test_the_documented_recipe_recomputes_our_wire_hashes(salt: str | None) -> None:
    tokens = [(i * 37) % 50_000 for i in range(2 * 16 + 5)]
    seq = Sequence(
        seq_id=0, request_id="r", token_ids=tokens, params=SamplingParams(), arrival=0, cache_salt=salt
    )
    ours = [external_block_hash(h) for h in seq.full_block_hashes(16)]
    assert len(ours) == 2 and _documented_recipe()(tokens, 16, salt) == ours
