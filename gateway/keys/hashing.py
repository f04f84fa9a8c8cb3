"""API keys' secrets: made here once, stored (in policies and key stores) only as SHA-256 hashes, and
looked up by that hash per request (``KeyIndex``: the policy's keys; ``KeyDirectory``: the others).

A key's text never reaches logs, metric labels or traces: everything downstream of the auth stage
sees the key's id (its name, or the first 12 hex digits of its hash) and its tenant.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol

from gateway.policy import ApiKey, Policy

KEY_PREFIX = "sk-sy-"
MAX_KEY_LENGTH = 256
"""Longer bearer tokens are refused before hashing (absurd lengths cost CPU, never a valid key)."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh key: ``sk-sy-`` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_stanza(key: str, tenant: str, name: str | None = None) -> str:
    """The YAML to paste under ``keys:`` for ``key`` (its hash only)."""
    lines = [f"  - sha256: {hash_key(key)}", f"    tenant: {tenant}"]
    if name:
        lines.append(f"    name: {name}")
    return "\n".join(lines) + "\n"


class KeyDirectory(Protocol):
    """Keys beside the policy's: those made at run time (``gateway.keys.KeyRegistry``)."""

    def find(self, sha256: str) -> ApiKey | None:
        """The key a secret with this hash opens now, or None."""
        ...


class KeyIndex:
    """The policy's keys by hash, with the pools and models each may use."""

    def __init__(self, policy: Policy) -> None:
        self.by_hash: dict[str, ApiKey] = {key.sha256: key for key in policy.keys}

    def lookup(self, key: str, others: KeyDirectory | None = None) -> ApiKey | None:
        """The policy's key for the text ``key``, else the one ``others`` holds (run-time keys)."""
        digest = hash_key(key)
        found = self.by_hash.get(digest)
        if found is None and others is not None:
            found = others.find(digest)
        return found

    def may_use(self, key: ApiKey, model: str, pool: str) -> bool:
        """Whether ``key`` (the policy's or one made at run time) may call ``model`` (served by ``pool``)."""
        if not key.pools and not key.models:
            return True
        return pool in key.pools or model in key.models
