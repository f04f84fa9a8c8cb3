"""What the console's JSON endpoints answer, built from the gateway's live state (no I/O, no await).

- :func:`pools_view`: every pool and replica as the balancer sees it now: health, breaker state, in-flight
  requests, load, the latency of recent answers (``GET /v1/admin/pools``);
- :func:`explain`: the serving policy's tier classifier on one prompt, as ``sortyard route explain``
  prints it (``POST /v1/admin/route/explain``);
- :func:`policy_view`: the serving policy as written, without key hashes or URL credentials, and when it
  was loaded (``GET /v1/admin/policy``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from gateway.compiled import CompiledPolicy
from gateway.errors import NotFound
from gateway.reloader import PolicyReloader
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.latency import LatencySummary
from gateway.tiers import ClassifyInput

__all__ = [
    "ExplainRequest",
    "ExplainView",
    "PolicyView",
    "PoolView",
    "PoolsView",
    "ReplicaView",
    "ScrapedLoad",
    "explain",
    "policy_view",
    "pools_view",
    "without_credentials",
]

MAX_PROMPT_CHARS = 1_000_000


class ScrapedLoad(msgspec.Struct, frozen=True):
    """A replica's own figures, from its ``/metrics`` page (only while fresh)."""

    running: float
    waiting: float
    kv_cache_usage: float
    """0..1"""


class ReplicaView(msgspec.Struct, frozen=True):
    """One replica, as the balancer sees it now."""

    label: str
    base_url: str
    """Without credentials."""
    model: str
    weight: float
    healthy: bool
    """Its breaker lets traffic through (closed, or half-open for trial requests)."""
    breaker: str
    """``closed``, ``half_open`` or ``open``."""
    breaker_opened_by_probe: bool
    outstanding: int
    """Requests in flight through this gateway process."""
    load: float
    """The load its pool's strategy reads (in-flight requests, plus scraped queue and KV use)."""
    num_requests: int
    num_successes: int
    num_failures: int
    latency: LatencySummary
    """Time to first byte of its recent good answers."""
    scraped: ScrapedLoad | None = None


class PoolView(msgspec.Struct, frozen=True):
    name: str
    strategy: str
    fallbacks: list[str]
    """The pools tried, in order, when this one cannot serve."""
    saturated: bool
    """Every usable replica has ``max_outstanding_per_replica`` requests in flight."""
    description: str
    replicas: list[ReplicaView]


class PoolsView(msgspec.Struct, frozen=True):
    """``GET /v1/admin/pools``."""

    data: list[PoolView]
    as_of: float
    """Unix time of this snapshot."""
    object: str = "list"


class ExplainRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/admin/route/explain``: a request as the classifier would see it."""

    prompt: Annotated[str, msgspec.Meta(max_length=MAX_PROMPT_CHARS)]
    """The user message."""
    system: Annotated[str, msgspec.Meta(max_length=MAX_PROMPT_CHARS)] | None = None
    """A system prompt before it."""
    tools: bool = False
    """The request declares tools."""
    json_mode: bool = False
    """``response_format`` asks for JSON."""


class ExplainView(msgspec.Struct, frozen=True):
    """Which pool ``model: "auto"`` would pick for the request, and why."""

    pool: str
    reason: str
    probabilities: dict[str, float] | None
    classifier: str
    """The policy's classifier kind: ``rules``, ``learned`` or ``examples``."""
    auto_model: str
    latency_ms: float


class PolicyView(msgspec.Struct, frozen=True):
    """``GET /v1/admin/policy``."""

    source: str
    overlay: str | None
    loaded_at: float
    """Unix time the serving policy was adopted: the start, or the last reload."""
    num_reloads: int
    """Policies adopted since the start (the first load not counted)."""
    num_refused: int
    """Reloads refused (an invalid file): the last good policy kept serving."""
    last_error: str | None
    """Why the newest reload was refused, until a later one succeeds."""
    policy: dict[str, Any]
    """The policy as written: keys without their hashes, URLs without credentials."""


def without_credentials(url: str) -> str:
    """``http://user:secret@h:8000/v1`` -> ``http://***@h:8000/v1``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _replica_view(balancer: Balancer, state: ReplicaState, now: float) -> ReplicaView:
    replica, breaker = state.replica, state.breaker
    healthy = state.is_healthy(now)  # turns an open breaker whose time passed half-open first
    scraped = None
    if state.load_fresh_until >= now:
        scraped = ScrapedLoad(state.num_running, state.num_waiting, state.kv_cache_usage)
    return ReplicaView(
        label=state.label.rpartition("@")[2],  # a label taken from a URL never shows its credentials
        base_url=without_credentials(replica.base_url),
        model=replica.model,
        weight=replica.weight,
        healthy=healthy,
        breaker=breaker.state,
        breaker_opened_by_probe=breaker.is_opened_by_probe,
        outstanding=state.outstanding,
        load=round(balancer.load(state), 3),
        num_requests=state.num_requests,
        num_successes=state.num_successes,
        num_failures=state.num_failures,
        latency=state.latency.summary(now),
        scraped=scraped,
    )


def pools_view(balancer: Balancer, compiled: CompiledPolicy) -> PoolsView:
    """Every pool of the serving policy with its replicas, now."""
    now = balancer.clock()
    pools = []
    for name, states in balancer.pools.items():
        pool = compiled.policy.pools.get(name)
        pools.append(
            PoolView(
                name=name,
                strategy=balancer.routing.strategy_of(name),
                fallbacks=list(balancer.pool_order(name)[1:]),
                saturated=balancer.is_saturated(name),
                description=pool.description if pool is not None else "",
                replicas=[_replica_view(balancer, state, now) for state in states],
            )
        )
    return PoolsView(data=pools, as_of=time.time())


def explain(compiled: CompiledPolicy, request: ExplainRequest) -> ExplainView:
    """The serving classifier's decision for ``request``; NotFound when the policy has none."""
    classifier, config = compiled.classifier, compiled.policy.classifier
    if classifier is None or config is None:
        raise NotFound(
            'The policy has no tier classifier: model "auto" is not served.', code="classifier_not_configured"
        )
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.append({"role": "user", "content": request.prompt})
    started = time.perf_counter()
    decision = classifier.classify(
        ClassifyInput(messages=messages, tools=request.tools, json_mode=request.json_mode)
    )
    return ExplainView(
        pool=decision.pool,
        reason=decision.reason,
        probabilities=decision.probabilities,
        classifier=str(config.__struct_config__.tag),
        auto_model=compiled.policy.auto_model,
        latency_ms=round((time.perf_counter() - started) * 1000.0, 3),
    )


def _scrub(value: Any) -> Any:
    """The policy's builtins without secrets: key hashes dropped, credentials cut out of URLs."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k != "sha256"}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return without_credentials(value)
    return value


def policy_view(reloader: PolicyReloader) -> PolicyView:
    """The serving policy and its reload history."""
    policy = reloader.policy
    document: dict[str, Any] = msgspec.to_builtins(policy)
    # a key is known by its name everywhere else (usage, limits, the admin API), never by its hash
    document["keys"] = [
        {**entry, "name": key.key_id} for entry, key in zip(document["keys"], policy.keys, strict=True)
    ]
    return PolicyView(
        source=policy.source or str(reloader.path),
        overlay=str(reloader.overlay) if reloader.overlay is not None else None,
        loaded_at=reloader.loaded_at,
        num_reloads=reloader.num_reloads,
        num_refused=reloader.num_refused,
        last_error=reloader.last_error,
        policy=_scrub(document),
    )
