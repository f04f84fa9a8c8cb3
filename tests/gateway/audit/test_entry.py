"""The entry format and the hash rule: sha256 over the sorted-key JSON of every field but ``hash``."""

from __future__ import annotations

import hashlib
import json

import msgspec

from gateway.audit.entry import GENESIS, Entry, Event, canonical, entry_hash, link


def test_the_first_entry_starts_the_chain_and_the_next_names_its_hash() -> None:
    first = link(Event(at=1, actor="root", action="key.create", target="ci"), None)
    second = link(Event(at=2, actor="root", action="key.revoke", target="ci"), first)
    assert (first.seq, first.prev) == (0, GENESIS)
    assert (second.seq, second.prev) == (1, first.hash)
    assert first.hash == entry_hash(first) != second.hash


def test_the_hash_is_sha256_of_the_sorted_json_without_the_hash_as_documented() -> None:
    entry = link(Event(at=5.5, actor="root", action="drain", details={"b": 1, "a": (1, 2)}), None)
    fields = json.loads(msgspec.json.encode(entry))
    del fields["hash"]
    by_hand = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    assert canonical(entry) == by_hand
    assert entry.hash == hashlib.sha256(by_hand).hexdigest()


def test_an_entry_read_back_hashes_the_same() -> None:
    entry = link(Event(at=7, actor="root", action="key.rotate", details={"grace_s": 3600.0}), None)
    again = msgspec.json.decode(msgspec.json.encode(entry), type=Entry)
    assert again == entry and entry_hash(again) == entry.hash
