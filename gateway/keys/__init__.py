"""API keys: their secrets and hashes, and the keys managed at run time: records, their stores (Redis,
a file), the registry every replica polls, the admin actions and the admin API's routes."""

from gateway.keys.admin import KeyAdmin
from gateway.keys.hashing import KeyDirectory, KeyIndex, hash_key, key_stanza, new_key
from gateway.keys.records import AuditEntry, KeyRecord, KeyView, Secret
from gateway.keys.registry import KeyRegistry
from gateway.keys.store import FileKeyStore, KeyStore, WriteConflict

__all__ = [
    "AuditEntry",
    "FileKeyStore",
    "KeyAdmin",
    "KeyDirectory",
    "KeyIndex",
    "KeyRecord",
    "KeyRegistry",
    "KeyStore",
    "KeyView",
    "Secret",
    "WriteConflict",
    "hash_key",
    "key_stanza",
    "new_key",
]
