"""Key names, shared by RedisStore and MemoryStore.

Every key one request touches carries the tenant's hash tag, ``sy:{t:<tenant>}:...``, so in Redis
Cluster they all land in one slot and one EVALSHA can do an admit (or a settle). The tenant is escaped
(``%``, ``{``, ``}``) so a tenant name can never end the tag early and can be read back from a key.
"""

from __future__ import annotations

import math

from gateway.stores.base import WINDOW_S


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _unescape(text: str) -> str:
    return text.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


class KeySpace:
    """Builds the store's key names under one prefix (``sy:`` by default)."""

    def __init__(self, prefix: str = "sy:") -> None:
        self.prefix = prefix
        self._roots: dict[str, str] = {}

    def tenant(self, tenant: str) -> str:
        """The hash-tagged root of every key of ``tenant`` (built once per tenant)."""
        root = self._roots.get(tenant)
        if root is None:
            if len(self._roots) >= 65536:
                self._roots.clear()
            root = self._roots[tenant] = f"{self.prefix}{{t:{_escape(tenant)}}}"
        return root

    def requests(self, tenant: str, scope: str) -> str:
        """Hash: second -> requests admitted in that second."""
        return f"{self.tenant(tenant)}:rpm:{scope}"

    def tokens(self, tenant: str, scope: str) -> str:
        """Hash: second -> tokens reserved (then settled) in that second."""
        return f"{self.tenant(tenant)}:tpm:{scope}"

    def leases(self, tenant: str, scope: str) -> str:
        """Sorted set: request id -> lease expiry (Unix seconds)."""
        return f"{self.tenant(tenant)}:conc:{scope}"

    def usage(self, tenant: str, month: str) -> str:
        """Hash: ``<scope>|<metric>`` -> number; the ledger and the budget spend of one month."""
        return f"{self.tenant(tenant)}:usage:{month}"

    def settled(self, tenant: str, reserved_at_s: float) -> str:
        """Set of settled request ids, one set per minute of reservation (fewer keys than one per id)."""
        return f"{self.tenant(tenant)}:settled:{math.floor(reserved_at_s / WINDOW_S)}"

    def written(self, tenant: str, at_s: float) -> str:
        """Set of the flush write ids applied, one set per minute the writes were made in."""
        return f"{self.tenant(tenant)}:written:{math.floor(at_s / WINDOW_S)}"

    def usage_pattern(self, month: str) -> str:
        """SCAN pattern matching every tenant's ledger of ``month``."""
        return f"{self.prefix}{{t:*}}:usage:{month}"

    def tenant_of_usage_key(self, key: str) -> str:
        """Read the tenant back from a ledger key."""
        start = len(self.prefix) + len("{t:")
        return _unescape(key[start : key.index("}", start)])
