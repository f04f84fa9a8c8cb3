"""One audit entry: what an admin (or the gateway itself) did, chained to the entry before it.

An ``Entry`` says who (``actor``, the admin key's name, and its ``tenant``; ``system`` for what the
gateway did on its own, such as a policy file reload), what (``action``, ``target``, ``details``),
when (``at``, unix seconds), from where (``client``, as ``gateway.client_address`` reads it) and how it
ended (``outcome`` ``ok`` or ``refused``, with the HTTP ``status``). It never holds a secret.

The chain: entry ``seq`` names the ``hash`` of entry ``seq - 1`` in ``prev`` (64 zeros for entry 0),
and its own ``hash`` is the SHA-256 (hex) of its canonical JSON without ``hash``: msgspec's encoding
of every other field with the keys sorted (``order="sorted"``: nested objects sorted too), no
whitespace, UTF-8. Editing, removing or reordering an entry breaks the chain (``gateway.audit.chain``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

__all__ = ["GENESIS", "Entry", "Event", "canonical", "entry_hash", "link"]

GENESIS = "0" * 64
"""The ``prev`` of entry 0."""

Outcome = Literal["ok", "refused"]


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """What happened, before it is chained (``AuditTrail.record`` stamps ``at``)."""

    at: float
    actor: str
    action: str
    """``key.create``, ``key.update``, ``key.rotate``, ``key.revoke``, ``policy.reload``, ``drain``,
    ``admin.read`` (a refused read of an admin endpoint)."""
    target: str = ""
    """What the action was on: a key's name, the policy file, the endpoint's path."""
    tenant: str | None = None
    """The acting key's tenant; None when no key was recognised (or for ``system``)."""
    details: dict[str, Any] = msgspec.field(default_factory=dict)
    client: str | None = None
    outcome: Outcome = "ok"
    status: int = 200


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """An ``Event`` with its place in the chain (one JSON line of the file, one element in Redis)."""

    seq: int
    prev: str
    at: float
    actor: str
    action: str
    target: str = ""
    tenant: str | None = None
    details: dict[str, Any] = msgspec.field(default_factory=dict)
    client: str | None = None
    outcome: Outcome = "ok"
    status: int = 200
    hash: str = ""
    object: str = "sortyard.audit_record"


def canonical(entry: Entry) -> bytes:
    """The bytes an entry's hash is taken over: every field but ``hash``, keys sorted."""
    fields = msgspec.structs.asdict(entry)
    del fields["hash"]
    return msgspec.json.encode(fields, order="sorted")


def entry_hash(entry: Entry) -> str:
    return hashlib.sha256(canonical(entry)).hexdigest()


def link(event: Event, tail: Entry | None) -> Entry:
    """``event`` as the entry after ``tail`` (None: the first). Values are normalised through JSON
    first (a tuple becomes a list, ``at`` a float), so the entry hashes the same once read back."""
    fields = msgspec.json.decode(msgspec.json.encode(event))
    fields["at"] = float(fields["at"])
    seq, prev = (0, GENESIS) if tail is None else (tail.seq + 1, tail.hash)
    unhashed = msgspec.convert({**fields, "seq": seq, "prev": prev}, Entry)
    return msgspec.structs.replace(unhashed, hash=entry_hash(unhashed))
