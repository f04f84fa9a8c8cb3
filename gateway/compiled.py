"""The policy compiled once per reload: everything the request path reads, built ahead of time.

A ``Policy`` is what the YAML says; a ``CompiledPolicy`` is what serving needs from it: the key
index, the tier classifier, the limit rules by caller, the telemetry settings (with the
environment's overrides), the ``GET /v1/models`` body and the trusted proxies. ``compile_policy``
runs when the policy loads and at each reload (``gateway.reloader``); every request carries the one
it started under (``Call.compiled``), so a reload mid-request changes nothing for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.client_address import ClientAddresses
from gateway.compression import Compressor
from gateway.keys.hashing import KeyIndex
from gateway.limit_rules import LimitRules
from gateway.policy import ApiKey, Policy, PolicyError
from gateway.policy.telemetry import TelemetryConfig, telemetry_of
from gateway.tiers.classifier import Classifier, ClassifierLoadError
from gateway.tiers.factory import build_classifier

__all__ = ["CompiledPolicy", "compile_policy", "model_card"]


def model_card(name: str) -> dict[str, Any]:
    """One entry of ``GET /v1/models``."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "sortyard"}


def _models_body(names: list[str]) -> bytes:
    return msgspec.json.encode({"object": "list", "data": [model_card(name) for name in names]})


@dataclass(frozen=True, slots=True, eq=False)
class CompiledPolicy:
    """One policy, ready to serve (read-only; the limit rules fill a memo as callers appear)."""

    policy: Policy
    keys: KeyIndex
    classifier: Classifier | None
    """The tier classifier of ``model: "auto"`` (None when the policy has none)."""
    limits: LimitRules
    telemetry: TelemetryConfig
    model_names: tuple[str, ...]
    models_body: bytes
    """``GET /v1/models`` for a key that may use every model."""
    clients: ClientAddresses
    """Who a request came from, under ``limits.unauthenticated.trusted_proxies``."""
    compression: Compressor | None = None
    """Encodes complete responses for clients that accept it; None when ``compression`` is off."""
    passthrough_paths: frozenset[str] = frozenset()
    """Every pool's ``passthrough_routes``: the paths ``gateway.proxy`` passes through."""

    def models_body_for(self, key: ApiKey | None) -> bytes:
        """``GET /v1/models`` as ``key`` sees it: only the models it may use."""
        if key is None or not (key.pools or key.models):
            return self.models_body
        policy = self.policy
        names = [m for m in self.model_names if self.keys.may_use(key, m, policy.pool_for_model(m) or "")]
        return _models_body(names)


def compile_policy(policy: Policy, environ: Mapping[str, str] | None = None) -> CompiledPolicy:
    """Compile a validated policy; PolicyError when a part cannot be built (a classifier file, a bad
    ``SORTYARD_*`` override)."""
    try:
        classifier = (
            build_classifier(policy.classifier, pools=list(policy.pools))
            if policy.classifier is not None
            else None
        )
    except ClassifierLoadError as e:
        raise PolicyError(f"{policy.source}: classifier: {e}") from None
    try:
        telemetry = telemetry_of(policy, os.environ if environ is None else environ)
    except ValueError as e:
        raise PolicyError(str(e)) from None
    names = tuple(policy.model_names())
    return CompiledPolicy(
        policy=policy,
        keys=KeyIndex(policy),
        classifier=classifier,
        limits=LimitRules(policy),
        telemetry=telemetry,
        model_names=names,
        models_body=_models_body(list(names)),
        clients=ClientAddresses(policy.limits.unauthenticated.trusted_proxies),
        compression=policy.compression.build(),
        passthrough_paths=frozenset(p for pool in policy.pools.values() for p in pool.passthrough_routes),
    )
