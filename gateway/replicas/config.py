"""Policy config for replica choice, health and pool fallbacks: the ``routing:`` section.

In a policy YAML::

    routing:
      balancer: {strategy: least_outstanding}     # round_robin | weighted | load_aware
      breaker: {failure_threshold: 5, open_s: 10, half_open_max: 1}
      health: {probe_interval_s: 5, probe_timeout_s: 1, path: /health, scrape_interval_s: 0}
      pools:                                      # per-pool overrides, all optional
        large:
          fallbacks: [medium, small]              # tried in order when large cannot serve
          max_outstanding_per_replica: 32         # beyond this on every replica, large is saturated
          queue: {max_wait_s: 10, max_queued_per_tenant: 50}   # then wait, fairly, for a slot
          strategy: load_aware
        small:
          health: {probe_interval_s: 0}           # a hosted API without /health: no probes

Every field has a default, so an absent ``routing:`` is a whole config. :func:`check_routing`
lists what a loaded config gets wrong (unknown pools, fallback cycles) with the path of each.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from gateway.replicas.fallback import fallback_problems

__all__ = [
    "BalancerConfig",
    "BreakerConfig",
    "HealthConfig",
    "PoolRouting",
    "QueueConfig",
    "RoutingConfig",
    "Strategy",
    "check_regions",
    "check_routing",
    "convert_routing",
]

Strategy = Literal["least_outstanding", "round_robin", "weighted", "load_aware"]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
OptionalSeconds = Annotated[float, msgspec.Meta(ge=0)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]


class BalancerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a replica is chosen among the healthy ones of a pool."""

    strategy: Strategy = "least_outstanding"
    """``least_outstanding`` (fewest in-flight requests per unit of weight), ``round_robin``,
    ``weighted`` (smooth weighted round robin, as nginx) or ``load_aware`` (scraped queue and KV use)."""
    kv_cache_weight: Annotated[float, msgspec.Meta(ge=0)] = 4.0
    """``load_aware``: how many queued requests a full KV cache counts as."""
    waiting_weight: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    """``load_aware``: how much one request waiting in the replica's queue counts."""


class BreakerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A circuit breaker per replica: closed -> open -> half-open -> closed."""

    failure_threshold: PositiveInt = 5
    """Consecutive failures that open the breaker: connect errors (refused or timed out), resets,
    5xx and malformed answers; never a timeout of a request the replica accepted, nor a 4xx."""
    failure_rate: Fraction | None = None
    """Also open when this share of the requests finished in ``window_s`` failed (off when unset)."""
    window_s: PositiveSeconds = 10.0
    """The tumbling window for ``failure_rate``."""
    min_requests: PositiveInt = 20
    """``failure_rate`` counts only once a window holds this many finished requests."""
    open_s: PositiveSeconds = 10.0
    """How long an open breaker refuses traffic before it lets trial requests through."""
    half_open_max: PositiveInt = 1
    """Trial requests in flight at once while half-open; a success closes, a failure reopens."""


class HealthConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Active checks: ``GET /health`` probes (never a completion) and ``/metrics`` scrapes."""

    probe_interval_s: OptionalSeconds = 5.0
    """Seconds between two probes of a replica; 0 turns probes off."""
    probe_timeout_s: PositiveSeconds = 1.0
    """A probe that takes longer failed."""
    path: str | None = None
    """Probed at the replica's server root: base_url ``http://h:8000/v1`` -> ``http://h:8000/health``.
    None: its kind's health page (``/health``; Triton ``/v2/health/ready``, Ollama ``/api/version``)."""
    unhealthy_threshold: PositiveInt = 2
    """Consecutive failed probes (no answer, timeout, HTTP 5xx) that open the replica's breaker."""
    healthy_threshold: PositiveInt = 1
    """Consecutive good probes that close a breaker the probes opened."""
    scrape_interval_s: OptionalSeconds = 0.0
    """Seconds between two ``/metrics`` scrapes; 0: off, except 2 s for pools using ``load_aware``."""
    metrics_path: str | None = None
    """The replica's load page at its server root. None: its kind's (``/metrics``; Ollama ``/api/ps``,
    llama.cpp ``/slots``); a replica's own ``metrics_url`` wins (Triton serves it on another port)."""


class QueueConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Fair queuing for a saturated pool: ``routing.pools.<name>.queue`` (``gateway.replicas.slot_queue``).

    A request that finds the pool and its fallbacks saturated waits in its tenant's queue instead of
    overloading a busy replica; a released slot goes to the most urgent priority class first, then by
    weighted fair share among tenants (``tenants.<name>.weight``), first come first served per tenant.
    """

    max_wait_s: PositiveSeconds = 30.0
    """The longest a request waits for a slot (its ``total_s`` deadline ends the wait sooner); then it
    gets 503 ``pool_saturated`` with ``Retry-After``."""
    max_queued_per_tenant: PositiveInt = 100
    """Requests of one tenant waiting at once; one more gets 429 ``queue_full`` with ``Retry-After``."""
    interactive_reserve: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Slots of the pool (and its fallbacks) that background work leaves to interactive requests: a batch
    line takes a slot only while more than this many are free, so an interactive request arriving
    beside a running batch finds one at once instead of waiting for a line to finish."""
    interactive_reserve_hold_s: PositiveSeconds = 2.0
    """How long the reserve is held after the pool's last interactive request: past it (no interactive
    traffic) batch lines may fill every slot, and the first interactive request after the lull waits for
    at most one of them to end."""


class PoolRouting(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Overrides and fallbacks for one pool (``routing.pools.<name>``)."""

    strategy: Strategy | None = None
    """This pool's balancing strategy (default: ``routing.balancer.strategy``)."""
    breaker: BreakerConfig | None = None
    """This pool's breaker settings, replacing ``routing.breaker`` as a whole."""
    health: HealthConfig | None = None
    """This pool's health settings, replacing ``routing.health`` as a whole."""
    health_urls: dict[str, str] = {}
    """Replica label -> full health URL, for a replica whose health page is elsewhere."""
    fallbacks: tuple[str, ...] = ()
    """Pools to try, in order, when this one has no healthy replica or is saturated; their own
    fallbacks follow (``large: [medium]`` and ``medium: [small]`` give large -> medium -> small)."""
    max_outstanding_per_replica: PositiveInt | None = None
    """The pool is saturated when every healthy replica has this many requests in flight."""
    queue: QueueConfig | None = None
    """Wait, in fair share per tenant, when the pool and its fallbacks are saturated (needs
    ``max_outstanding_per_replica``). None: a saturated chain's first usable replica serves anyway."""


REGION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
"""What a region is called (``eu-west-1``, ``us-central1``): it goes into a response header and a metric
label as it is. A policy naming anything else is refused; a client's header value that is not one is
ignored."""
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
"""An HTTP header name (RFC 9110's token)."""

Milliseconds = Annotated[float, msgspec.Meta(ge=0)]


class RegionsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``routing.regions``: where this gateway and its clients are, and how far regions are apart."""

    local: str | None = None
    """This gateway's region. The ``SORTYARD_REGION`` environment variable wins, so one policy serves
    gateways in several regions."""
    client_header: str | None = None
    """A header naming the client's region (e.g. ``x-client-region``, in any case), set by the edge
    proxy; believed only from the policy's trusted proxies (``limits.unauthenticated.trusted_proxies``)."""
    latency_ms: dict[str, dict[str, Milliseconds]] = {}
    """Round trips: ``{from: {to: ms}}``; a pair given one way is read both ways, so it is given once
    (or both ways alike). One end of each pair is a region replicas run in; the other may be one only
    clients or gateways are in."""
    max_latency_ms: Milliseconds | None = None
    """The latency budget: a region farther than this from the origin serves only when no nearer one
    can."""
    measure_rtt: bool = True
    """From the gateway's own region, check the budget against the replicas' measured round trip (the
    health probes' median) instead of the table, and rank regions the table leaves out by it."""
    unknown_latency_ms: Milliseconds = 1000.0
    """The distance of a pair the table leaves out (and of replicas without a region)."""

    def __post_init__(self) -> None:
        if self.client_header is not None:  # requests' header names arrive in lower case
            msgspec.structs.force_setattr(self, "client_header", self.client_header.lower())


class RoutingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Replica choice, breakers, health checks and fallbacks: policy-wide defaults plus per pool."""

    balancer: BalancerConfig = BalancerConfig()
    """The default balancing strategy."""
    breaker: BreakerConfig = BreakerConfig()
    """The default per-replica circuit breaker."""
    health: HealthConfig = HealthConfig()
    """The default active checks."""
    pools: dict[str, PoolRouting] = {}
    """Per-pool overrides and fallbacks, by pool name."""
    regions: RegionsConfig = RegionsConfig()
    """Where this gateway and its clients are, and how far regions are apart
    (``gateway.replicas.regions``)."""

    def for_pool(self, pool: str) -> PoolRouting:
        return self.pools.get(pool) or _NO_OVERRIDES

    def strategy_of(self, pool: str) -> Strategy:
        return self.for_pool(pool).strategy or self.balancer.strategy

    def breaker_of(self, pool: str) -> BreakerConfig:
        return self.for_pool(pool).breaker or self.breaker

    def health_of(self, pool: str) -> HealthConfig:
        return self.for_pool(pool).health or self.health


_NO_OVERRIDES = PoolRouting()


def check_routing(routing: RoutingConfig, pools: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``routing`` for a policy with these pools (name -> Pool); empty if fine.

    Each problem names its path, e.g. ``routing.pools.large.fallbacks[0]: unknown pool 'xl'``.
    """
    problems: list[str] = []
    for name, pool_routing in routing.pools.items():
        where = f"routing.pools.{name}"
        if name not in pools:
            problems.append(f"{where}: unknown pool (pools are {', '.join(pools)})")
            continue
        labels = {replica.label for replica in getattr(pools[name], "replicas", ())}
        for label, url in pool_routing.health_urls.items():
            if label not in labels:
                problems.append(
                    f"{where}.health_urls.{label}: unknown replica (labels are {', '.join(labels)})"
                )
            elif not url.startswith(("http://", "https://")):
                problems.append(f"{where}.health_urls.{label}: expected an http(s) URL, got {url!r}")
        if pool_routing.queue is not None and pool_routing.max_outstanding_per_replica is None:
            problems.append(f"{where}.queue: needs max_outstanding_per_replica (the cap it waits on)")
    for health, where in [(routing.health, "routing.health"), *_pool_health(routing)]:
        for field in ("path", "metrics_path"):
            value = getattr(health, field)
            if value is not None and not value.startswith("/"):
                problems.append(f"{where}.{field}: expected a path starting with '/'")
    problems.extend(fallback_problems(routing, pools))
    problems.extend(check_regions(routing.regions, pools))
    return problems


def check_regions(regions: RegionsConfig, pools: Mapping[str, Any]) -> list[str]:
    """What is wrong with the region names of ``pools``' replicas and ``routing.regions``; empty if fine.

    A region name goes into the ``x-sortyard-region`` header and a metric label as it is, so anything
    but a :data:`REGION_NAME` is refused here rather than failing each request that reaches it.
    """
    problems: list[str] = []
    homes: set[str] = set()
    for pool_name, pool in pools.items():
        for i, replica in enumerate(getattr(pool, "replicas", ())):
            region = getattr(replica, "region", None)
            if region is not None and not REGION_NAME.match(region):
                problems.append(f"pools.{pool_name}.replicas[{i}].region: {_not_a_region(region)}")
            elif region is not None:
                homes.add(region)
    where = "routing.regions"
    if regions.local is not None and not REGION_NAME.match(regions.local):
        problems.append(f"{where}.local: {_not_a_region(regions.local)}")
    header = regions.client_header
    if header is not None and not HEADER_NAME.match(header):
        problems.append(
            f"{where}.client_header: expected an HTTP header name (letters, digits, '-'), got {header!r}"
        )
    problems.extend(_latency_problems(regions.latency_ms, homes))
    return problems


def _latency_problems(latency_ms: Mapping[str, Mapping[str, float]], homes: set[str]) -> list[str]:
    """A name that is no region, a region's distance to itself, a pair neither of whose regions has a
    replica (a typo, or a figure that can never rank one), a pair given both ways with two figures."""
    problems: list[str] = []
    given: dict[frozenset[str], tuple[str, float]] = {}
    for source, row in latency_ms.items():
        if not REGION_NAME.match(source):
            problems.append(f"routing.regions.latency_ms: {_not_a_region(source)}")
            continue
        for target, ms in row.items():
            where = f"routing.regions.latency_ms.{source}"
            if not REGION_NAME.match(target):
                problems.append(f"{where}: {_not_a_region(target)}")
                continue
            where = f"{where}.{target}"
            pair = frozenset((source, target))
            earlier = given.setdefault(pair, (f"{source}.{target}", ms))
            if source == target:
                problems.append(f"{where}: a region is 0 ms from itself; leave it out")
            elif source not in homes and target not in homes:
                problems.append(
                    f"{where}: neither region has a replica, so the figure ranks none "
                    f"(replicas are in {', '.join(sorted(homes)) or 'no region'})"
                )
            elif earlier[1] != ms:
                problems.append(
                    f"{where}: {ms:g} contradicts latency_ms.{earlier[0]}: {earlier[1]:g} "
                    "(a pair is read both ways: give it once)"
                )
    return problems


def _not_a_region(name: str) -> str:
    return (
        f"{name!r} is not a region name (a letter or digit, then letters, digits, '.', '_', '-'; 63 at most)"
    )


def _pool_health(routing: RoutingConfig) -> list[tuple[HealthConfig, str]]:
    return [(p.health, f"routing.pools.{n}.health") for n, p in routing.pools.items() if p.health]


def convert_routing(document: Any) -> RoutingConfig:
    """Validate a decoded ``routing:`` mapping; errors name the path (``routing.pools.large.open_s``).

    msgspec names a dict key ``[...]``, so each pool is checked alone first to name it.
    """
    if isinstance(document, Mapping) and isinstance(document.get("pools"), Mapping):
        for name, pool in document["pools"].items():
            try:
                msgspec.convert(pool, PoolRouting, strict=True)
            except msgspec.ValidationError as e:
                raise ValueError(_where(e, f"routing.pools.{name}")) from None
    try:
        return msgspec.convert(document if document is not None else {}, RoutingConfig, strict=True)
    except msgspec.ValidationError as e:
        raise ValueError(_where(e, "routing")) from None


def _where(error: msgspec.ValidationError, prefix: str) -> str:
    text = str(error)
    what, _, path = text.partition(" - at `$")
    path = path.rstrip("`")
    what = what[:1].lower() + what[1:]
    return f"{prefix}{path}: {what}" if path else f"{prefix}: {what}"
