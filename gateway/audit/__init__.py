"""The audit trail: an append-only, hash-chained record of every admin action (``docs/security.md``).

``entry`` (what one entry holds and the hash rule), ``chain`` (verify a chain), ``store`` (the
protocol), ``file_store`` and ``redis_store`` (where it lives), ``trail`` (what the gateway calls),
``policy_diff`` (a reload's entry), ``factory`` (which store).
"""

from gateway.audit.chain import Verdict, verify
from gateway.audit.entry import GENESIS, Entry, Event
from gateway.audit.file_store import FileAuditStore
from gateway.audit.store import AuditStore, AuditStoreError
from gateway.audit.trail import SYSTEM, AuditTrail

__all__ = [
    "GENESIS",
    "SYSTEM",
    "AuditStore",
    "AuditStoreError",
    "AuditTrail",
    "Entry",
    "Event",
    "FileAuditStore",
    "Verdict",
    "verify",
]
