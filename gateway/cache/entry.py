"""What a cache stores: a versioned, checksummed envelope around a payload.

::

    offset  size  field
    0       4     magic and version  b"SYC\\x01"
    4       1     kind               1 chat.completion, 2 text_completion, 3 embedding vector
    5       1     reserved (0)
    6       4     payload length     little-endian u32: catches truncation
    10      4     CRC-32 of payload  little-endian u32: catches corruption
    14      ...   payload            the complete JSON response exactly as sent to the client
                                     (kinds 1 and 2), or one ``embedding`` JSON value (kind 3)

A hit on a non-streaming request serves the payload bytes as they are (no JSON decoding on the hot
path: the checksum is what proves them intact). Anything that does not decode (wrong magic or
version, short, long, bad checksum, unknown kind) raises :class:`CorruptEntry`; the caches then
delete the entry and report a miss, never serve it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

MAGIC = b"SYC\x01"
_HEADER = struct.Struct("<4sBBII")
HEADER_BYTES = _HEADER.size


class CorruptEntry(ValueError):
    """Stored bytes that are not a whole, intact entry of this version."""


class EntryKind(IntEnum):
    """What the payload holds."""

    CHAT = 1
    """A ``chat.completion`` JSON object."""
    COMPLETION = 2
    """A ``text_completion`` JSON object."""
    EMBEDDING = 3
    """The JSON value of one ``data[i].embedding`` (a list of floats, or a base64 string)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached payload and its kind."""

    kind: EntryKind
    body: bytes

    def encode(self) -> bytes:
        """The stored bytes: header, then payload."""
        return _HEADER.pack(MAGIC, self.kind, 0, len(self.body), zlib.crc32(self.body)) + self.body

    @property
    def num_bytes(self) -> int:
        """Size of the stored bytes."""
        return HEADER_BYTES + len(self.body)

    @classmethod
    def decode(cls, data: bytes) -> Entry:
        """Parse stored bytes; raises :class:`CorruptEntry` on anything but an intact entry."""
        if len(data) < HEADER_BYTES:
            raise CorruptEntry(f"entry of {len(data)} bytes is shorter than its header")
        magic, kind, _reserved, length, crc = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CorruptEntry(f"bad magic or version {magic!r}")
        body = data[HEADER_BYTES:]
        if len(body) != length:
            raise CorruptEntry(f"payload is {len(body)} bytes, header says {length} (truncated?)")
        if zlib.crc32(body) != crc:
            raise CorruptEntry("payload checksum mismatch")
        try:
            entry_kind = EntryKind(kind)
        except ValueError:
            raise CorruptEntry(f"unknown entry kind {kind}") from None
        return cls(entry_kind, body)
