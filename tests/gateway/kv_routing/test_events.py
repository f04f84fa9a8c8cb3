"""Decoding vLLM's KV-event batches: the map and the array shapes, lenient about what it does not know."""

from __future__ import annotations

import msgspec
import pytest

from gateway.kv_routing.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventDecodeError,
    decode_batch,
)
from tests.support.kv_events import batch, cleared, removed, stored


@pytest.mark.parametrize("shape", ["map", "array"])
def test_both_shapes_decode_to_the_same_events(shape: str) -> None:
    payload = batch(
        [stored([b"h1", b"h2"], b"h0", range(8), 4, lora_name="ad"), removed([b"h0"]), cleared()],
        shape=shape,  # type: ignore[arg-type]
        ts=12.5,
        rank=1,
    )
    decoded = decode_batch(payload)
    assert decoded.ts == 12.5 and decoded.data_parallel_rank == 1
    assert decoded.events == (
        BlockStored((b"h1", b"h2"), b"h0", tuple(range(8)), 4, "GPU", "ad"),
        BlockRemoved((b"h0",), "GPU"),
        AllBlocksCleared(),
    )


def test_unknown_fields_and_event_kinds_are_ignored_missing_trailing_fields_default() -> None:
    newer = {**stored([7], None, range(4), 4), "extra_keys": [None], "group_idx": 0, "future": 1}
    payload = msgspec.msgpack.encode(
        {"ts": 1.0, "events": [newer, {"type": "BlockMoved", "x": 1}], "data_parallel_rank": None, "new": 2}
    )
    decoded = decode_batch(payload)
    assert decoded.events == (BlockStored((7,), None, (0, 1, 2, 3), 4, "GPU", None, 0, (None,)),)
    # an older array-shaped event without medium and lora_name, and a batch without the rank
    old = msgspec.msgpack.encode([2.0, [["BlockStored", [9], None, [1, 2], 2], ["BlockRemoved", [9]]]])
    assert decode_batch(old).events == (
        BlockStored((9,), None, (1, 2), 2, None, None),
        BlockRemoved((9,), None),
    )


@pytest.mark.parametrize("shape", ["map", "array"])
def test_extra_keys_carry_a_first_blocks_cache_salt(shape: str) -> None:
    event = stored([1, 2], None, range(4), 2, extra_keys=[["salt-a"], None])
    (decoded,) = decode_batch(batch([event], shape=shape)).events  # type: ignore[arg-type]
    assert isinstance(decoded, BlockStored) and decoded.extra_keys == (("salt-a",), None)
    nested = stored([1], None, range(2), 2, extra_keys=[["lora", ["img", 3]]])
    (decoded,) = decode_batch(batch([nested])).events
    assert isinstance(decoded, BlockStored) and decoded.extra_keys == (("lora", ("img", 3)),)
    hash(decoded.extra_keys)  # hashable all the way down
    (decoded,) = decode_batch(batch([stored([1], None, range(2), 2, extra_keys="junk")])).events  # type: ignore[arg-type]
    assert isinstance(decoded, BlockStored) and decoded.extra_keys is None


def test_list_hashes_become_hashable() -> None:
    decoded = decode_batch(batch([stored([[1, 2]], [0, 1], range(2), 2)]))
    event = decoded.events[0]
    assert (
        isinstance(event, BlockStored)
        and event.block_hashes == ((1, 2),)
        and event.parent_block_hash == (0, 1)
    )


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgspec.msgpack.encode("hello"),
        msgspec.msgpack.encode({"ts": 1.0}),
        msgspec.msgpack.encode({"ts": 1.0, "events": [42]}),
        msgspec.msgpack.encode({"ts": 1.0, "events": [{"type": "BlockStored", "block_hashes": [1]}]}),
        msgspec.msgpack.encode({"ts": 1.0, "events": [{"type": "BlockRemoved", "block_hashes": 1}]}),
    ],
)
def test_what_is_not_a_batch_is_an_event_decode_error(payload: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_batch(payload)
