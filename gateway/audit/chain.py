"""Walk a chain of audit entries: intact, or the first bad ``seq`` and why.

Given the entries in stored order (JSON lines), each must decode, hash to its own ``hash``, carry the
next ``seq`` (a removed, reordered or duplicated entry shows as a gap) and name the previous entry's
hash in ``prev``. Cutting entries off the end leaves a shorter chain that still verifies: compare the
head hash with a copy kept elsewhere (``sortyard audit export``) to see that.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from gateway.audit.entry import GENESIS, Entry, entry_hash

__all__ = ["Verdict", "decode_entry", "verify"]


class Verdict(msgspec.Struct, frozen=True):
    """The outcome of a walk: ``num_entries`` good ones, then the first bad one (if any)."""

    num_entries: int
    head: str
    """The hash of the last good entry (``GENESIS`` when there is none)."""
    bad_seq: int | None = None
    """The ``seq`` where the chain breaks: the position a good entry should have had there."""
    reason: str | None = None

    @property
    def is_intact(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        if self.is_intact:
            return f"{self.num_entries} entries, chain intact (head {self.head[:16]})"
        return (
            f"chain broken at seq {self.bad_seq}: {self.reason} ({self.num_entries} good entries before it)"
        )


def decode_entry(line: bytes) -> Entry:
    return msgspec.json.decode(line, type=Entry)


def verify(lines: Iterable[bytes]) -> Verdict:
    """Walk ``lines`` (one JSON entry each, oldest first; blank lines skipped)."""
    expected, prev = 0, GENESIS
    for line in lines:
        if not line.strip():
            continue
        try:
            entry = decode_entry(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Verdict(expected, prev, expected, f"unreadable entry ({exc})")
        if entry.seq != expected:
            return Verdict(expected, prev, expected, f"gap: found seq {entry.seq} where {expected} belongs")
        if entry_hash(entry) != entry.hash:
            return Verdict(expected, prev, expected, "hash mismatch: the entry was changed")
        if entry.prev != prev:
            return Verdict(expected, prev, expected, "prev mismatch: it does not follow the entry before")
        expected, prev = expected + 1, entry.hash
    return Verdict(expected, prev)
