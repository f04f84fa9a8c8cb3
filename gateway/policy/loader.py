"""Loading a policy: YAML read, an overlay merged on top, Structs converted, everything validated.

``load_policy(path)`` parses YAML into frozen msgspec Structs and validates it; every error names the
file, the path inside it and what was expected (``pools.large.replicas[0].base_url: expected an
http(s) URL``). A git-ignored overlay file (``policies/local.yaml`` next to the policy by default) is
merged on top, so a developer's own keys never land in the committed file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from gateway.client_address import parse_networks
from gateway.policy.errors import describe
from gateway.policy.kv_events import check_kv_routing
from gateway.policy.schema import Policy, PolicyError
from gateway.policy.yaml_document import read_document
from gateway.replicas.config import check_routing
from gateway.tiers.classifier import ClassifierLoadError
from gateway.tiers.factory import build_classifier

__all__ = ["load_policy", "merge", "parse_policy"]


def _convert(document: Mapping[str, Any], source: str) -> Policy:
    return msgspec.convert({**document, "source": source}, Policy, strict=True)


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a server the gateway calls, else None: an http(s) URL with a host,
    a port that exists, and no query or fragment (the gateway appends paths: a query would end up in
    the middle of every request's URL)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"expected an http(s) URL, got {url!r}"
    try:
        parts.port  # noqa: B018 (raises for a port past 65535)
    except ValueError:
        return f"expected a port from 1 to 65535, got {url!r}"
    if parts.port == 0:
        return f"expected a port from 1 to 65535, got {url!r}"
    if parts.query or parts.fragment:
        return f"expected no query or fragment (paths are appended), got {url!r}"
    return None


def _check(policy: Policy) -> list[str]:
    problems: list[str] = []
    if not policy.pools:
        problems.append("pools: expected at least one pool")
    for pool_name, pool in policy.pools.items():
        if not pool.replicas:
            problems.append(f"pools.{pool_name}.replicas: expected at least one replica")
        for i, replica in enumerate(pool.replicas):
            where = f"pools.{pool_name}.replicas[{i}]"
            problem = url_problem(replica.base_url)
            if problem is not None:
                problems.append(f"{where}.base_url: {problem}")
            if replica.metrics_url is not None and (problem := url_problem(replica.metrics_url)):
                problems.append(f"{where}.metrics_url: {problem}")
            if not replica.model:
                problems.append(f"{where}.model: expected the served model name")
    for alias, target in policy.aliases.items():
        if alias in policy.pools:
            problems.append(f"aliases.{alias}: is also a pool name")
        if target == policy.auto_model and policy.classifier is not None:
            continue
        if target not in policy.pools:
            problems.append(
                f"aliases.{alias}: expected one of the pools ({', '.join(policy.pools)}), got {target!r}"
            )
    seen: dict[str, int] = {}
    for i, key in enumerate(policy.keys):
        if key.sha256 in seen:
            problems.append(f"keys[{i}].sha256: duplicate of keys[{seen[key.sha256]}] (one hash, one key)")
        seen.setdefault(key.sha256, i)
        for pool_name in key.pools:
            if pool_name not in policy.pools:
                problems.append(f"keys[{i}].pools: unknown pool {pool_name!r}")
        for model in key.models:
            if policy.pool_for_model(model) is None:
                problems.append(f"keys[{i}].models: unknown model {model!r}")
    for set_name, guardrail in policy.guardrails.items():
        if guardrail.webhook is not None and (problem := url_problem(guardrail.webhook.url)):
            problems.append(f"guardrails.{set_name}.webhook.url: {problem}")
    if policy.sso is not None:
        if problem := url_problem(policy.sso.issuer.rstrip("/") or "-"):
            problems.append(f"sso.issuer: {problem}")
        if not policy.sso.algorithms:
            problems.append("sso.algorithms: expected at least one (RS256, ES256)")
    names = [k.key_id for k in policy.keys]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"keys: duplicate key name {name!r}")
    for tenant_name, tenant in policy.tenants.items():
        for pool_name in tenant.pools:
            if pool_name not in policy.pools:
                problems.append(f"tenants.{tenant_name}.pools.{pool_name}: unknown pool")
    for pool_name in policy.cache.pools:
        if pool_name not in policy.pools:
            problems.append(f"cache.pools.{pool_name}: unknown pool")
    semantic = policy.cache.semantic
    for pool_name in (semantic.pool, *semantic.pools, *semantic.thresholds) if semantic.enabled else ():
        if pool_name not in policy.pools:
            problems.append(f"cache.semantic: unknown pool {pool_name!r}")
    problems.extend(check_routing(policy.routing, policy.pools))
    embedding_pool = semantic.pool if semantic.enabled else None
    problems.extend(check_kv_routing(policy.kv_routing, policy.pools, embedding_pool))
    for i, cidr in enumerate(policy.limits.unauthenticated.trusted_proxies):
        try:
            parse_networks([cidr])
        except ValueError as e:
            problems.append(f"limits.unauthenticated.trusted_proxies[{i}]: {e}")
    if policy.auto_model in policy.pools:
        problems.append(f"auto_model: {policy.auto_model!r} is also a pool name")
    if policy.auto_model in policy.aliases and policy.classifier is not None:  # the alias would shadow it
        problems.append(f"auto_model: {policy.auto_model!r} is also an alias")
    if policy.classifier is not None:
        try:
            build_classifier(policy.classifier, pools=list(policy.pools))
        except ClassifierLoadError as e:
            problems.append(f"classifier: {e}")
    return problems


def merge(base: Any, overlay: Any) -> Any:
    """Deep-merge two YAML documents: mappings merge, anything else in the overlay wins."""
    if isinstance(base, Mapping) and isinstance(overlay, Mapping):
        merged = dict(base)
        for key, value in overlay.items():
            if key == "keys" and isinstance(base.get(key), list) and isinstance(value, list):
                merged[key] = [*base[key], *value]  # an overlay adds keys, never hides the committed ones
            else:
                merged[key] = merge(base[key], value) if key in base else value
        return merged
    return overlay


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(f"{path}: cannot read: {e}") from None
    return read_document(text, str(path))


def parse_policy(document: Any, source: str) -> Policy:
    """Validate a decoded YAML document into a Policy."""
    if not isinstance(document, Mapping):
        raise PolicyError(f"{source}: expected a mapping at the top level")
    where = _non_finite(document)
    if where is not None:
        raise PolicyError(f"{source}: {where[0]}: expected a finite number, got {where[1]}")
    try:
        policy = msgspec.convert({**document, "source": source}, Policy, strict=True)
    except msgspec.ValidationError as e:
        convert = partial(_convert, source=source)
        raise PolicyError(f"{source}: {describe(e, document, convert)}") from None
    problems = _check(policy)
    if problems:
        raise PolicyError("\n".join(f"{source}: {p}" for p in problems))
    return policy


def _non_finite(node: Any, path: str = "") -> tuple[str, float] | None:
    """The path and value of the first ``.inf`` or ``.nan`` in the document, else None. No figure of a
    policy is infinite (an unbounded one is null or left out), and one that slipped past a field's
    bounds would fail at run time: a TTL in milliseconds, a score that is NaN, a timeout that never
    fires."""
    if isinstance(node, float):
        return None if math.isfinite(node) else (path or ".", node)
    if isinstance(node, Mapping):
        for key, value in node.items():
            found = _non_finite(value, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found = _non_finite(value, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def load_policy(path: str | Path, overlay: str | Path | None = None) -> Policy:
    """Read, merge and validate a policy file (plus an optional overlay that may be absent)."""
    path = Path(path)
    document = _read_yaml(path)
    if overlay is None or not Path(overlay).exists():
        return parse_policy(document, str(path))
    merged = merge(document, _read_yaml(Path(overlay)) or {})
    try:
        return parse_policy(merged, str(path))
    except PolicyError as e:  # the paths are the merged document's: say it held the overlay's values
        raise PolicyError(f"{e}\n{path}: (with the overlay {overlay} merged on top)") from None
