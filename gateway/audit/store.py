"""``AuditStore``: where the chain lives, and the one rule every store keeps: an append reads the
tail and writes the next entry as one step, so two writers never fork the chain.

Stores: ``FileAuditStore`` (a JSONL file on this host, or memory) and ``RedisAuditStore`` (every
replica's). Neither trims: the chain grows by one entry (~300 bytes) per admin action.
"""

from __future__ import annotations

from typing import Protocol

from gateway.audit.entry import Entry, Event

__all__ = ["AuditStore", "AuditStoreError"]


class AuditStoreError(Exception):
    """The chain could not be extended (its tail is unreadable, or writers kept racing)."""


class AuditStore(Protocol):
    async def append(self, event: Event) -> Entry:
        """Chain ``event`` after the current tail and store it; the stored entry."""
        ...

    async def lines(self) -> list[bytes]:
        """Every entry as stored (one JSON document each), oldest first."""
        ...

    async def close(self) -> None: ...
