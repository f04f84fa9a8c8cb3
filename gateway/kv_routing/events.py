"""Decode the KV-cache events an engine publishes (vLLM's ``KVEventBatch`` over ZeroMQ).

A payload is msgpack of a batch ``(ts, events, data_parallel_rank)`` whose events are tagged structs:
``BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
extra_keys, ...)``,
``BlockRemoved(block_hashes, medium, ...)`` and ``AllBlocksCleared()``. vLLM has encoded them both as
maps (``{"type": "BlockStored", "block_hashes": ...}``, today) and as arrays whose first item is the
tag (``["BlockStored", [...], ...]``, older releases), so both shapes are read, fields missing at the
end take their defaults, fields this module does not know are ignored, and an event of an unknown
kind is skipped: an engine newer than the gateway still steers picks. Block hashes are opaque (an
int or bytes, whatever the engine's hash function gives); the index never interprets them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import msgspec

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "Event",
    "EventBatch",
    "EventDecodeError",
    "decode_batch",
]


class EventDecodeError(ValueError):
    """A payload that is not a KV event batch (the subscriber drops it and counts a gap)."""


class BlockStored(msgspec.Struct, frozen=True):
    """Blocks the engine now holds: ``token_ids`` are theirs, ``block_size`` tokens each, in order;
    the first one's parent is ``parent_block_hash`` (None: they start a prompt)."""

    block_hashes: tuple[Hashable, ...]
    parent_block_hash: Hashable | None
    token_ids: tuple[int, ...]
    block_size: int
    medium: str | None = None
    lora_name: str | None = None
    group_idx: int | None = None
    """The KV group (vLLM: 0 the full-attention layers; a hybrid model's sliding layers are another)."""
    extra_keys: tuple[tuple[Hashable, ...] | None, ...] | None = None
    """Per block, what else went into its hash besides its tokens (vLLM's ``extra_keys``): the cache
    salt on a sequence's first block (``("salt",)``), a LoRA's name, multimodal items' identifiers."""


class BlockRemoved(msgspec.Struct, frozen=True):
    """Blocks the engine evicted."""

    block_hashes: tuple[Hashable, ...]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, frozen=True):
    """The engine dropped its whole prefix cache (a reset, a model reload)."""


Event = BlockStored | BlockRemoved | AllBlocksCleared


class EventBatch(msgspec.Struct, frozen=True):
    """One published message: when, what, and which data-parallel rank sent it."""

    ts: float
    events: tuple[Event, ...]
    data_parallel_rank: int | None = None


_decode = msgspec.msgpack.Decoder().decode

# the positional fields of each tag in the array shape, in vLLM's order (extra items are ignored)
_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
)
_REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")
_BATCH_FIELDS = ("ts", "events", "data_parallel_rank")


def decode_batch(payload: bytes) -> EventBatch:
    """The batch in ``payload``; EventDecodeError when it is not one."""
    try:
        raw = _decode(payload)
    except msgspec.DecodeError as e:
        raise EventDecodeError(f"not msgpack: {e}") from None
    fields = _fields(raw, _BATCH_FIELDS)
    if fields is None or not isinstance(fields.get("events"), list):
        raise EventDecodeError("not a KV event batch: expected (ts, events, data_parallel_rank)")
    events = tuple(event for event in map(_event, fields["events"]) if event is not None)
    ts = fields.get("ts")
    rank = fields.get("data_parallel_rank")
    return EventBatch(
        float(ts) if isinstance(ts, int | float) else 0.0, events, rank if isinstance(rank, int) else None
    )


def _event(raw: Any) -> Event | None:
    body: Any
    if isinstance(raw, Mapping):
        tag, body = raw.get("type"), raw
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag, body = raw[0], raw[1:]
    else:
        raise EventDecodeError(f"not a KV event: {raw!r:.80}")
    if tag == "BlockStored":
        fields = _fields(body, _STORED_FIELDS)
        assert fields is not None
        token_ids, block_size = fields.get("token_ids"), fields.get("block_size")
        if not isinstance(token_ids, list) or not isinstance(block_size, int) or block_size < 1:
            raise EventDecodeError("BlockStored without token_ids or block_size")
        return BlockStored(
            _hashes(fields.get("block_hashes")),
            _hashable(fields.get("parent_block_hash")),
            tuple(token_ids),
            block_size,
            _text(fields.get("medium")),
            _text(fields.get("lora_name")),
            _int(fields.get("group_idx")),
            _extra_keys(fields.get("extra_keys")),
        )
    if tag == "BlockRemoved":
        fields = _fields(body, _REMOVED_FIELDS)
        assert fields is not None
        return BlockRemoved(
            _hashes(fields.get("block_hashes")), _text(fields.get("medium")), _int(fields.get("group_idx"))
        )
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    return None  # a kind this gateway does not know yet


def _fields(raw: Any, names: Sequence[str]) -> Mapping[str, Any] | None:
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, list):
        return dict(zip(names, raw, strict=False))
    return None


def _hashes(raw: Any) -> tuple[Hashable, ...]:
    if not isinstance(raw, list):
        raise EventDecodeError("block_hashes: expected a list")
    return tuple(_hashable(h) for h in raw)


def _hashable(raw: Any) -> Hashable:
    return tuple(raw) if isinstance(raw, list) else raw


def _extra_keys(raw: Any) -> tuple[tuple[Hashable, ...] | None, ...] | None:
    if not isinstance(raw, list):
        return None
    return tuple(_frozen(keys) if isinstance(keys, list) else None for keys in raw)


def _frozen(raw: Any) -> Any:
    """Lists as tuples, all the way down (an identifier may itself be a list)."""
    return tuple(_frozen(item) for item in raw) if isinstance(raw, list) else raw


def _text(raw: Any) -> str | None:
    return raw if isinstance(raw, str) else None


def _int(raw: Any) -> int | None:
    return raw if type(raw) is int else None
