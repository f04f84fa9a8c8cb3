"""The policy: pools of replicas, model aliases, timeouts and limits, from one YAML file.

``load_policy(path)`` parses YAML into frozen msgspec Structs and validates it; every error names the
file, the path inside it and what was expected (``pools.large.replicas[0].base_url: expected an
http(s) URL``). A git-ignored overlay file (``policies/local.yaml`` next to the policy by default) is
merged on top, so a developer's own keys never land in the committed file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
import yaml

from gateway.cache.config import CacheConfig
from gateway.replicas.config import RoutingConfig, check_routing, convert_routing
from gateway.replicas.pools import Pool, Timeouts
from gateway.telemetry.config import TelemetryConfig
from gateway.tiers.classifier import ClassifierLoadError
from gateway.tiers.config import ClassifierConfig
from gateway.tiers.factory import build_classifier

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
Name = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN, max_length=128)]


class PolicyError(ValueError):
    """A policy file that cannot be served; the message says where and why."""


Count = Annotated[int, msgspec.Meta(ge=0)]
Sha256Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class RateLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Limits of one scope; absent means unlimited."""

    requests_per_minute: Count | None = None
    """Requests admitted in any 60-second window."""
    tokens_per_minute: Count | None = None
    """Prompt tokens + max_tokens reserved up front, settled to real usage, in any 60-second window."""
    max_concurrent: Count | None = None
    """Requests in flight at once."""


class Budget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A monthly spend cap (UTC calendar month)."""

    monthly_usd: Annotated[float, msgspec.Meta(ge=0)]


class ApiKey(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A client API key, by the SHA-256 of its text (never the key itself)."""

    sha256: Sha256Hex
    """Lower-case hex SHA-256 of the key (``switchyard keys new`` prints it)."""
    tenant: Name
    """Who the key belongs to; limits, budgets and cache scopes are per tenant."""
    name: Name | None = None
    """A label for usage reports and logs; defaults to the first 12 hex digits of the hash."""
    pools: tuple[str, ...] = ()
    """Pools this key may use (empty: all)."""
    models: tuple[str, ...] = ()
    """Further model names (aliases) this key may use, besides those of its pools."""
    limits: RateLimits | None = None
    budget: Budget | None = None
    admin: bool = False
    """May read ``GET /v1/usage``."""
    priority: int | None = None
    """Scheduling priority sent upstream as ``priority`` (vLLM and the reference engine run lower
    values first); overrides the tenant's. None: the tenant's, else none is sent."""
    allow_client_priority: bool = False
    """May requests set their own ``priority``? Off: a request that does is refused (400
    ``priority_not_allowed``). On: it is forwarded, but never below (more urgent than) the key's
    or tenant's ``priority``."""

    @property
    def key_id(self) -> str:
        return self.name or self.sha256[:12]


class Tenant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Limits shared by all keys of a tenant, overall and per pool."""

    limits: RateLimits | None = None
    budget: Budget | None = None
    pools: dict[Name, RateLimits] = msgspec.field(default_factory=dict)
    """Per-pool limits for this tenant (``large: {requests_per_minute: 60}``)."""
    priority: int | None = None
    """Scheduling priority of this tenant's requests (lower runs first), for keys without their own."""


class Auth(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Who may call."""

    required: bool = True
    """When false, requests with no key or an unknown one run as the anonymous tenant (the SDK always
    sends some key); known keys still get their own tenant, limits and budget."""
    anonymous_tenant: Name = "anonymous"


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where limits, leases and the usage ledger live. Read at start-up (a change needs a restart)."""

    url_env: str | None = "SWITCHYARD_REDIS_URL"
    """Environment variable holding a ``redis://`` URL; unset or empty: the in-process store."""
    on_failure: Literal["fail_open", "fail_closed"] = "fail_open"
    """When Redis fails: fall back to a local limiter, or answer 503."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=5)] = 0.25
    """No request waits longer than this on the store."""
    local_credit: bool = True
    """Admit most requests from credit taken in Redis and write settles in batches (see
    ``gateway/stores/credit.py``): limits stay exact across replicas, with a fraction of the round
    trips. Off: one Redis round trip to admit and one to settle every request."""
    flush_interval_s: Annotated[float, msgspec.Meta(gt=0, le=5)] = 0.05
    """With local credit: how often settled usage is written to Redis (another replica's
    ``/v1/usage`` sees it this much later at most), and spent seconds' credit handed back."""
    default_reserve_tokens: Count = 256
    """Output tokens reserved when a request gives no ``max_tokens``."""
    unknown_model_encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base"
    """The tiktoken encoding that counts prompts for models that are not OpenAI's (OpenAI model names
    get their own). Neither is exact for other models, and the reservation is settled to the real
    usage anyway; cl100k's table costs ~33 MiB less memory per worker than o200k's."""


class Retry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Retries of failed upstream attempts (before the first byte reached the client)."""

    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=10)] = 3
    """Attempts in all, the first included."""
    backoff_s: Annotated[float, msgspec.Meta(ge=0)] = 0.025
    """The first pause; it doubles per attempt, with +-50% jitter."""
    max_backoff_s: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    on_timeout: bool = False
    """Also retry a stream that timed out before its first event (``first_byte_s``; off: a replica
    too slow to answer is usually overloaded, and a retry doubles the work). A plain request times
    out only at its ``total_s`` deadline, with no time left for a retry."""


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Request-shape limits."""

    max_body_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1_048_576
    """Largest accepted request body; larger gets 413."""


class Policy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything a platform team configures, in one frozen object."""

    pools: dict[Name, Pool]
    """Pools by name; a pool's name is also a model name clients may ask for."""
    version: int = 1
    aliases: dict[Name, Name] = msgspec.field(default_factory=dict)
    """Model names clients use -> pool name (``gpt-4o-mini: small``)."""
    timeouts: Timeouts = Timeouts()
    retry: Retry = Retry()
    limits: Limits = Limits()
    auth: Auth = Auth()
    keys: tuple[ApiKey, ...] = ()
    """Client API keys, by hash."""
    tenants: dict[Name, Tenant] = msgspec.field(default_factory=dict)
    store: StoreConfig = StoreConfig()
    cache: CacheConfig = CacheConfig()
    """Response cache, prompt-prefix affinity and embedding cache."""
    telemetry: TelemetryConfig = TelemetryConfig()
    """Trace sampling, content capture, access logs, tenant labels on metrics."""
    routing: RoutingConfig = RoutingConfig()
    """Replica choice, circuit breakers, health probes and pool fallbacks."""
    classifier: ClassifierConfig | None = None
    """How ``model: "auto"`` picks a pool (rules, learned or examples); None: "auto" is unknown."""
    auto_model: Name = "auto"
    """The model name that asks the classifier to choose (aliases may point at it too)."""
    source: str = ""
    """The file this policy came from (filled by the loader)."""

    def pool_for_model(self, model: str) -> str | None:
        """The pool serving ``model`` (a pool name or an alias), or None; the auto model gives
        ``auto_model`` (the classifier decides)."""
        if model in self.pools:
            return model
        if model == self.auto_model and self.classifier is not None:
            return self.auto_model
        return self.aliases.get(model)

    def priority_for(self, key: ApiKey | None, tenant: str) -> int | None:
        """The scheduling priority the policy gives a caller: its key's, else its tenant's, else None."""
        if key is not None and key.priority is not None:
            return key.priority
        tenant_policy = self.tenants.get(tenant)
        return tenant_policy.priority if tenant_policy is not None else None

    def timeouts_for(self, pool: str) -> Timeouts:
        return self.pools[pool].timeouts or self.timeouts

    def model_names(self) -> list[str]:
        auto = (
            [self.auto_model] if self.classifier is not None and self.auto_model not in self.aliases else []
        )
        return [*self.pools, *self.aliases, *auto]


_MSGSPEC_PATH = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def _format_msgspec_error(error: msgspec.ValidationError) -> str:
    match = _MSGSPEC_PATH.match(str(error))
    assert match is not None
    what, path = match.group("what"), (match.group("path") or "").lstrip(".")
    what = what[0].lower() + what[1:] if what else what
    return f"{path}: {what}" if path else what


def _check(policy: Policy) -> list[str]:
    problems: list[str] = []
    if not policy.pools:
        problems.append("pools: expected at least one pool")
    for pool_name, pool in policy.pools.items():
        if not pool.replicas:
            problems.append(f"pools.{pool_name}.replicas: expected at least one replica")
        for i, replica in enumerate(pool.replicas):
            where = f"pools.{pool_name}.replicas[{i}]"
            parts = urlsplit(replica.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"{where}.base_url: expected an http(s) URL, got {replica.base_url!r}")
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
    problems.extend(check_routing(policy.routing, policy.pools))
    if policy.auto_model in policy.pools:
        problems.append(f"auto_model: {policy.auto_model!r} is also a pool name")
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
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PolicyError(f"{path}: invalid YAML: {e}") from None


def parse_policy(document: Any, source: str) -> Policy:
    """Validate a decoded YAML document into a Policy."""
    if not isinstance(document, Mapping):
        raise PolicyError(f"{source}: expected a mapping at the top level")
    if "routing" in document:
        try:
            convert_routing(document["routing"])
        except ValueError as e:
            raise PolicyError(f"{source}: {e}") from None
    pools = document.get("pools")
    if isinstance(pools, Mapping):
        # msgspec names a dict key `[...]`: check each pool alone so the error can name it
        for name, pool in pools.items():
            try:
                msgspec.convert(pool, Pool, strict=True)
            except msgspec.ValidationError as e:
                inner = _format_msgspec_error(e)
                sep = "" if inner.startswith(("[", ".")) or ": " not in inner else "."
                where = f"pools.{name}{sep}{inner}" if ": " in inner else f"pools.{name}: {inner}"
                raise PolicyError(f"{source}: {where}") from None
    try:
        policy = msgspec.convert({**document, "source": source}, Policy, strict=True)
    except msgspec.ValidationError as e:
        raise PolicyError(f"{source}: {_format_msgspec_error(e)}") from None
    problems = _check(policy)
    if problems:
        raise PolicyError("\n".join(f"{source}: {p}" for p in problems))
    return policy


def load_policy(path: str | Path, overlay: str | Path | None = None) -> Policy:
    """Read, merge and validate a policy file (plus an optional overlay that may be absent)."""
    path = Path(path)
    document = _read_yaml(path)
    if overlay is not None and Path(overlay).exists():
        document = merge(document, _read_yaml(Path(overlay)) or {})
    return parse_policy(document, str(path))
