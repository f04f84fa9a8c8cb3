"""The policy's document: frozen msgspec Structs for every section (pools, keys, tenants, limits, ...).

Each feature owns its own section's Struct (``gateway.replicas.pools`` and ``.config``,
``gateway.tiers.config``, ``gateway.cache.config``, ``gateway.compression``,
``gateway.policy.telemetry``); ``Policy`` puts them together. Loading and validation are
``gateway.policy.loader``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from gateway.cache.config import CacheConfig
from gateway.compression import CompressionConfig
from gateway.guardrails.config import GuardrailSet
from gateway.policy.batches import BatchesConfig
from gateway.policy.kv_events import KvRoutingConfig
from gateway.policy.sso import SsoConfig
from gateway.policy.telemetry import TelemetryConfig
from gateway.replicas.config import RoutingConfig
from gateway.replicas.pools import Pool, Timeouts
from gateway.tiers.config import ClassifierConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
Name = Annotated[str, msgspec.Meta(pattern=NAME_PATTERN, max_length=128)]

KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
KeyName = Annotated[
    str,
    msgspec.Meta(
        pattern=KEY_NAME_PATTERN,
        max_length=128,
        description="Letters, digits and . _ : - (no /): the name is one segment of the key's URL.",
    ),
]
"""A key's name (in the policy or made through the admin API): ``Name`` less ``/``, which model names
need but a key's name cannot carry, since ``/v1/admin/keys/{name}`` takes it as one path segment (a
slash, even as ``%2F``, would make a key no route can reach)."""


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


Role = Literal["admin", "operator", "viewer", "tenant-admin"]
"""Admin roles, most powerful first; what each may do is ``gateway.roles.ACTIONS``."""


class ApiKey(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A client API key, by the SHA-256 of its text (never the key itself)."""

    sha256: Sha256Hex
    """Lower-case hex SHA-256 of the key (``sortyard keys new`` prints it)."""
    tenant: Name
    """Who the key belongs to; limits, budgets and cache scopes are per tenant."""
    name: KeyName | None = None
    """A label for usage reports and logs, and the key's segment of ``/v1/admin/keys/{name}`` (so no
    ``/``); defaults to the first 12 hex digits of the hash."""
    pools: tuple[str, ...] = ()
    """Pools this key may use (empty: all)."""
    models: tuple[str, ...] = ()
    """Further model names (aliases) this key may use, besides those of its pools."""
    limits: RateLimits | None = None
    budget: Budget | None = None
    admin: bool = False
    """The same as ``role: admin`` (kept for older policies); with another role it is refused."""
    role: Role | None = None
    """What the key may do on the admin API and the console (``gateway.roles``); None: nothing."""
    priority: int | None = None
    """Scheduling priority sent upstream as ``priority`` (vLLM and the reference engine run lower
    values first); overrides the tenant's. None: the tenant's, else none is sent."""
    allow_client_priority: bool = False
    """May requests set their own ``priority``? Off: a request that does is refused (400
    ``priority_not_allowed``). On: it is forwarded, but never below (more urgent than) the key's
    or tenant's ``priority``."""
    guardrails: tuple[str, ...] = ()
    """Guardrail sets (by name) its requests go through, after its pool's."""

    def __post_init__(self) -> None:
        if self.admin and self.role not in (None, "admin"):
            raise ValueError(f"admin: true contradicts role: {self.role}; give only the role")

    @property
    def key_id(self) -> str:
        return self.name or self.sha256[:12]

    @property
    def effective_role(self) -> Role | None:
        """The role this key acts with: its ``role``, else ``admin`` for ``admin: true``."""
        return self.role or ("admin" if self.admin else None)


class Tenant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Limits shared by all keys of a tenant, overall and per pool."""

    limits: RateLimits | None = None
    budget: Budget | None = None
    pools: dict[Name, RateLimits] = msgspec.field(default_factory=dict)
    """Per-pool limits for this tenant (``large: {requests_per_minute: 60}``)."""
    priority: int | None = None
    """Scheduling priority of this tenant's requests (lower runs first), for keys without their own."""
    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """This tenant's share of a saturated pool's fair queue (``routing.pools.<pool>.queue``), relative
    to the other tenants waiting in the same priority class: 2 gets twice the turns of 1."""


class Auth(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Who may call."""

    required: bool = True
    """When false, requests with no key or an unknown one run as the anonymous tenant (the SDK always
    sends some key); known keys still get their own tenant, limits and budget."""
    anonymous_tenant: Name = "anonymous"


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where limits, leases and the usage ledger live. Read at start-up (a change needs a restart)."""

    url_env: str | None = "SORTYARD_REDIS_URL"
    """Environment variable holding a ``redis://`` URL; unset or empty: the in-process store."""
    on_failure: Literal["fail_open", "fail_closed"] = "fail_open"
    """When Redis fails: fall back to a local limiter, or answer 503."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=5)] = 0.25
    """No request waits longer than this on the store."""
    cache_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=5)] = 0.05
    """The most one Redis call of a cache (responses, prefix affinity, embeddings, sticky tiers, the
    semantic cache) may take: past it the request goes on as a miss, and that cache skips Redis for
    a second. Raise it where Redis is far (another zone) or the machine is loaded."""
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


PerMinute = Annotated[int, msgspec.Meta(ge=1)]


class UnauthenticatedLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Per-client bounds on work done before a key is known, counted in the store the other limits use
    (so shared by every replica on one Redis). The client is the request's address (IPv6: its /64)."""

    failed_auths_per_minute: PerMinute | None = 60
    """401s one client may get in any 60-second window; past it a failure gets 429
    ``too_many_auth_failures`` with Retry-After instead. A valid key from that client still passes.
    null: no bound."""
    requests_per_minute: PerMinute | None = 600
    """Requests one client may make to ``/metrics`` and ``/openapi.json`` in any 60-second window
    (429 past it). ``/healthz`` and ``/readyz`` are never limited: probes must always get through.
    null: no bound."""
    trusted_proxies: tuple[str, ...] = ()
    """CIDRs (``10.0.0.0/8``, ``::1/128``) of the proxies in front of the gateway: when the socket peer
    is one of them, the client is the right-most ``X-Forwarded-For`` hop outside them. From any other
    peer ``X-Forwarded-For`` is ignored: the peer is the client."""


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Request-shape limits, and per-client limits on unauthenticated work."""

    max_body_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1_048_576
    """Largest accepted request body; larger gets 413."""
    unauthenticated: UnauthenticatedLimits = UnauthenticatedLimits()
    """Failed authentications and requests to the open endpoints, per client address."""


class ResponsesConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Stored responses of the Responses API (``store: true``, the default): what
    ``GET /v1/responses/{id}`` and ``previous_response_id`` read, per tenant."""

    ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 30 * 24 * 3600.0
    """How long a stored response is kept (OpenAI keeps them 30 days)."""
    max_memory_bytes: Annotated[int, msgspec.Meta(gt=0)] = 64 * 1024 * 1024
    """Without a store URL they live in this process, least recently used pushed out past this."""


class Policy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything a platform team configures, in one frozen object."""

    pools: dict[Name, Pool]
    """Pools by name; a pool's name is also a model name clients may ask for."""
    version: Literal[1] = 1
    """The policy format's version: 1 is the only one (a file written for a later one is refused)."""
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
    responses: ResponsesConfig = ResponsesConfig()
    """Stored responses of the Responses API: their TTL, and their memory bound in process."""
    batches: BatchesConfig = BatchesConfig()
    """OpenAI's Files and Batch APIs: the files directory, batch sizes, and the batch runner."""
    compression: CompressionConfig = CompressionConfig()
    """Compression of complete responses for clients that accept it (off by default)."""
    telemetry: TelemetryConfig = TelemetryConfig()
    """Trace sampling, content capture, access logs, tenant labels on metrics."""
    routing: RoutingConfig = RoutingConfig()
    """Replica choice, circuit breakers, health probes and pool fallbacks."""
    kv_routing: KvRoutingConfig = KvRoutingConfig()
    """KV-cache-aware replica picks from the engines' KV events, per pool (``gateway.kv_routing``)."""
    sso: SsoConfig | None = None
    """Single sign-on (``gateway.sso``): JWT bearer tokens on the admin API, OIDC login for the console."""
    guardrails: dict[Name, GuardrailSet] = msgspec.field(default_factory=dict)
    """Named sets of prompt and answer checks (``gateway.guardrails``), applied by pools and keys."""
    classifier: ClassifierConfig | None = None
    """How ``model: "auto"`` picks a pool (rules, learned or examples); None: "auto" is unknown."""
    auto_model: Name = "auto"
    """The model name that asks the classifier to choose (aliases may point at it too)."""
    source: str = ""
    """The file this policy came from (filled by the loader)."""

    def __post_init__(self) -> None:
        named = [(f"pools.{n}", p.guardrails) for n, p in self.pools.items()]
        named += [(f"keys[{i}]", k.guardrails) for i, k in enumerate(self.keys)]
        for where, names in named:
            unknown = [name for name in names if name not in self.guardrails]
            if unknown:
                raise ValueError(f"{where}.guardrails: unknown guardrail set {unknown[0]!r}")

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
