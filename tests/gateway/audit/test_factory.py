"""The audit store follows the policy's Redis when its URL is set, else the settings' file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.audit.factory import build_audit_store
from gateway.audit.file_store import FileAuditStore
from gateway.audit.redis_store import RedisAuditStore
from gateway.policy import parse_policy
from gateway.settings import Settings

POOLS = {"small": {"replicas": [{"base_url": "http://a:1/v1", "model": "m"}]}}


async def test_a_file_without_redis_and_redis_when_its_url_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(audit_file=str(tmp_path / "audit.jsonl"))
    plain = build_audit_store(parse_policy({"pools": POOLS}, "t"), settings)
    assert isinstance(plain, FileAuditStore) and plain.path == tmp_path / "audit.jsonl"
    monkeypatch.setenv("AUDIT_TEST_REDIS", "redis://127.0.0.1:1/0")
    policy = parse_policy({"pools": POOLS, "store": {"url_env": "AUDIT_TEST_REDIS"}}, "t")
    shared = build_audit_store(policy, settings)
    assert isinstance(shared, RedisAuditStore)
    await shared.close()


def test_the_file_comes_from_the_environment() -> None:
    assert Settings.from_env({"SORTYARD_AUDIT_FILE": "/var/audit.jsonl"}).audit_file == "/var/audit.jsonl"
    assert Settings.from_env({}).audit_file is None
