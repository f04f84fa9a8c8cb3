"""The stored envelope: round trip, and every kind of damage detected."""

from __future__ import annotations

import pytest

from gateway.cache import CorruptEntry, Entry, EntryKind
from gateway.cache.entry import HEADER_BYTES
from tests.gateway.cache.samples import CHAT, encode


def test_round_trip() -> None:
    entry = Entry(EntryKind.CHAT, encode(CHAT))
    data = entry.encode()
    assert len(data) == entry.num_bytes == HEADER_BYTES + len(entry.body)
    assert Entry.decode(data) == entry


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: b"",
        lambda d: d[:5],  # shorter than the header
        lambda d: d[:-1],  # truncated payload
        lambda d: d[: len(d) // 2],
        lambda d: d + b"x",  # trailing garbage
        lambda d: _flip(d, len(d) - 3),  # a bit flipped in the payload
        lambda d: _flip(d, 0),  # bad magic
        lambda d: d[:3] + b"\x02" + d[4:],  # another format version
        lambda d: d[:4] + b"\x09" + d[5:],  # unknown kind
        lambda d: b'{"id": "chatcmpl-1"}',  # a plain JSON value someone else wrote
    ],
)
def test_damage_is_detected(damage) -> None:  # type: ignore[no-untyped-def]
    data = Entry(EntryKind.CHAT, encode(CHAT)).encode()
    with pytest.raises(CorruptEntry):
        Entry.decode(damage(data))
