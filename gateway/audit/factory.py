"""Which audit store a gateway writes to: the policy store's Redis when its URL is set (one chain for
every replica), else ``settings.audit_file`` (this host), else memory."""

from __future__ import annotations

import os

from gateway.audit.file_store import FileAuditStore
from gateway.audit.redis_store import RedisAuditStore
from gateway.audit.store import AuditStore
from gateway.policy import Policy
from gateway.settings import Settings

__all__ = ["build_audit_store"]


def build_audit_store(policy: Policy, settings: Settings) -> AuditStore:
    url = os.environ.get(policy.store.url_env) if policy.store.url_env else None
    if url:
        return RedisAuditStore.from_url(url, timeout_s=max(policy.store.timeout_s, 1.0))
    return FileAuditStore(settings.audit_file)
