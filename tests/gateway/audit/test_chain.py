"""Verification: an intact chain passes; an edit, a removal, a reorder or a cut in the middle is named."""

from __future__ import annotations

import json

import msgspec
import pytest

from gateway.audit.chain import verify
from gateway.audit.entry import Entry, Event, entry_hash, link


def _chain(n: int = 5) -> list[bytes]:
    entries: list[Entry] = []
    for i in range(n):
        event = Event(at=100 + i, actor="root", action="key.update", target=f"k{i}", details={"i": i})
        entries.append(link(event, entries[-1] if entries else None))
    return [msgspec.json.encode(e) for e in entries]


def test_an_intact_chain_passes() -> None:
    verdict = verify(_chain())
    assert verdict.is_intact and verdict.num_entries == 5
    assert verdict.describe().startswith("5 entries, chain intact")


def test_an_empty_chain_is_intact() -> None:
    assert verify([]).describe().startswith("0 entries, chain intact")


def test_an_edited_entry_is_a_hash_mismatch() -> None:
    lines = _chain()
    lines[2] = lines[2].replace(b'"actor":"root"', b'"actor":"mallory"')
    verdict = verify(lines)
    assert (verdict.bad_seq, verdict.num_entries) == (2, 2)
    assert "hash mismatch" in (verdict.reason or "")


def test_an_edit_with_its_hash_recomputed_breaks_the_next_link() -> None:
    lines = _chain()
    edited = msgspec.structs.replace(msgspec.json.decode(lines[2], type=Entry), actor="mallory")
    lines[2] = msgspec.json.encode(msgspec.structs.replace(edited, hash=entry_hash(edited)))
    verdict = verify(lines)
    assert verdict.bad_seq == 3 and "prev mismatch" in (verdict.reason or "")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda lines: lines[:2] + lines[3:],  # one removed
        lambda lines: [lines[0], lines[2], lines[1], *lines[3:]],  # two swapped
        lambda lines: lines[:1] + lines[4:],  # cut out of the middle
    ],
    ids=["delete", "reorder", "truncate-middle"],
)
def test_a_missing_or_moved_entry_is_a_gap(tamper: object) -> None:
    verdict = verify(tamper(_chain()))  # type: ignore[operator]
    assert not verdict.is_intact and "gap" in (verdict.reason or "")
    assert verdict.bad_seq == verdict.num_entries  # the first place a good entry is missing


def test_a_renumbered_chain_still_fails_on_its_hashes() -> None:
    lines = _chain()
    del lines[1]
    fields = json.loads(lines[1])
    fields["seq"] = 1
    lines[1] = json.dumps(fields).encode()
    verdict = verify(lines)
    assert verdict.bad_seq == 1 and "hash mismatch" in (verdict.reason or "")


def test_an_unreadable_line_is_named() -> None:
    lines = _chain(3)
    lines[1] = b"{not json"
    verdict = verify(lines)
    assert verdict.bad_seq == 1 and "unreadable" in (verdict.reason or "")
