"""A reload's entry: which top-level sections and which pools changed; a refused reload too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from gateway.audit import AuditTrail, Entry, FileAuditStore
from gateway.audit.policy_diff import PolicyReloadAudit, policy_diff
from gateway.policy import parse_policy
from gateway.reloader import PolicyReloader


def _document(**pools: str) -> dict[str, Any]:
    return {"pools": {name: {"replicas": [{"base_url": url, "model": name}]} for name, url in pools.items()}}


def test_the_diff_names_sections_and_pools_never_values() -> None:
    old = parse_policy(_document(small="http://a:1/v1", big="http://b:1/v1"), "old")
    changed = _document(small="http://a:2/v1", tiny="http://c:1/v1")
    changed["auth"] = {"required": False}
    diff = policy_diff(old, parse_policy(changed, "new"))
    assert diff["pools"] == {"added": ["tiny"], "removed": ["big"], "changed": ["small"]}
    assert "pools" in diff["sections"] and "auth" in diff["sections"] and "store" not in diff["sections"]
    assert policy_diff(old, old) == {"sections": [], "pools": {"added": [], "removed": [], "changed": []}}


async def test_a_file_reload_and_a_refused_one_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_document(small="http://a:1/v1")))
    reloader = PolicyReloader(path, overlay=tmp_path / "none.yaml")
    trail = AuditTrail(FileAuditStore(None), clock=lambda: 9.0)
    audit = PolicyReloadAudit(trail, str(path))
    reloader.subscribe(audit)  # the serving policy: no entry
    reloader.refusal_listeners.append(audit.refused)
    path.write_text(yaml.safe_dump(_document(small="http://a:2/v1")))
    assert reloader.reload()
    path.write_text("pools: [not, a, mapping]")
    assert not reloader.reload()
    await trail.flush()
    entries = [msgspec.json.decode(line, type=Entry) for line in await trail.store.lines()]
    assert [(e.actor, e.action, e.outcome) for e in entries] == [
        ("system", "policy.reload", "ok"),
        ("system", "policy.reload", "refused"),
    ]
    assert entries[0].details["pools"]["changed"] == ["small"] and entries[0].target == str(path)
    assert entries[1].details["error"] and entries[1].details["process"] == audit.process


async def test_a_reload_inside_acting_as_names_its_caller_once(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_document(small="http://a:1/v1")))
    reloader = PolicyReloader(path, overlay=tmp_path / "none.yaml")
    trail = AuditTrail(FileAuditStore(None), clock=lambda: 9.0)
    audit = PolicyReloadAudit(trail, str(path))
    reloader.subscribe(audit)
    reloader.refusal_listeners.append(audit.refused)
    path.write_text(yaml.safe_dump(_document(small="http://a:2/v1")))
    with audit.acting_as("ops-key", tenant="ops", client="10.0.0.1"):
        assert reloader.reload()
    path.write_text("pools: [not, a, mapping]")
    with pytest.raises(RuntimeError), audit.acting_as("ops-key", tenant="ops", client="10.0.0.1"):
        assert not reloader.reload()
        raise RuntimeError("the block failed")
    assert not reloader.reload()  # outside the block: the gateway's own again
    await trail.flush()
    entries = [msgspec.json.decode(line, type=Entry) for line in await trail.store.lines()]
    assert [(e.actor, e.tenant, e.client, e.outcome) for e in entries] == [
        ("ops-key", "ops", "10.0.0.1", "ok"),
        ("ops-key", "ops", "10.0.0.1", "refused"),
        ("system", None, None, "refused"),
    ]
