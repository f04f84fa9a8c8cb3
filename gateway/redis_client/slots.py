"""Redis Cluster's hash slots: CRC16 (XMODEM) of the key, or of its hash tag ``{...}``, mod 16384.

Every key one store call touches carries its tenant's tag (``sy:{t:<tenant>}:...``, key_names.py), so
they share one slot and one EVALSHA may touch them all; ``slot_of_keys`` refuses a command whose keys
do not (Redis would answer CROSSSLOT, or worse, a script would run on a node lacking some keys).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

NUM_SLOTS = 16384


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _table()


def crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ byte) & 0xFF]
    return crc


def hash_tag(key: bytes) -> bytes:
    """The part of ``key`` that is hashed: the first ``{...}`` when not empty, else the whole key."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


@functools.lru_cache(maxsize=65536)
def key_slot(key: str | bytes) -> int:
    """The key's slot; remembered (a tenant's keys come again and again on the hot path)."""
    data = key.encode() if isinstance(key, str) else key
    return crc16(hash_tag(data)) % NUM_SLOTS


class CrossSlotError(ValueError):
    """A command's keys hash to more than one slot (a bug in the key layout, never sent)."""


def slot_of_keys(keys: Sequence[Any]) -> int | None:
    """The one slot of ``keys`` (None when there are none); CrossSlotError when they differ."""
    slot = None
    for key in keys:
        this = key_slot(key if isinstance(key, str | bytes) else str(key))  # (lru_cache: hashable keys)
        if slot is None:
            slot = this
        elif this != slot:
            raise CrossSlotError(f"keys in different hash slots ({slot}, {this}): {list(keys)!r}")
    return slot


_SCRIPT_CALLS = {b"EVALSHA", b"EVAL", b"EVALSHA_RO", b"EVAL_RO", b"FCALL", b"FCALL_RO"}
_ALL_ARGS_KEYS = {b"MGET", b"DEL", b"UNLINK", b"EXISTS", b"TOUCH"}
_NO_KEYS = {b"PING", b"SCAN", b"SCRIPT", b"INFO", b"FLUSHDB", b"FLUSHALL", b"DBSIZE", b"ECHO", b"TIME"}


def command_keys(args: Sequence[Any]) -> Sequence[Any]:
    """The keys of a command (the few forms the gateway sends; otherwise the first argument)."""
    name = args[0].upper().encode() if isinstance(args[0], str) else bytes(args[0]).upper()
    if name in _SCRIPT_CALLS:
        return args[3 : 3 + int(args[2])]
    if name in _ALL_ARGS_KEYS:
        return args[1:]
    if name == b"MSET":
        return args[1::2]
    if name in _NO_KEYS or len(args) < 2:
        return ()
    return args[1:2]
