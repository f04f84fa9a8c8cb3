"""The policy: pools of replicas, model aliases, keys, tenants, limits, caches, routing and telemetry,
from one YAML file (``schema``: what it holds; ``loader``: reading and validating it; ``telemetry``:
its telemetry section). Serving reads it compiled (``gateway.compiled``).
"""

from gateway.policy.loader import load_policy, merge, parse_policy
from gateway.policy.schema import (
    NAME_PATTERN,
    ApiKey,
    Auth,
    Budget,
    Limits,
    Name,
    Policy,
    PolicyError,
    RateLimits,
    ResponsesConfig,
    Retry,
    StoreConfig,
    Tenant,
    UnauthenticatedLimits,
)

__all__ = [
    "NAME_PATTERN",
    "ApiKey",
    "Auth",
    "Budget",
    "Limits",
    "Name",
    "Policy",
    "PolicyError",
    "RateLimits",
    "ResponsesConfig",
    "Retry",
    "StoreConfig",
    "Tenant",
    "UnauthenticatedLimits",
    "load_policy",
    "merge",
    "parse_policy",
]
