"""One request's journey: a ``Call`` (all per-request state) passed through ``Stage`` s in one order.

The order is declared once, in ``gateway.app.build_pipeline``::

    auth -> route -> limits -> guardrails -> response cache -> semantic cache -> embeddings cache
        -> (pick replica -> upstream, retried)

A stage either fills in part of the call or finishes it by setting ``call.result``; the first
result ends the walk. Then the result filters run (a cache tapping a stream, embeddings merged back
in order). A stage that fails raises a ``GatewayError``; it never finishes the call. Work that must
happen when the response is over (settling token reservations, releasing a replica, storing a cache
entry, recording metrics) is a finisher: the pipeline's own, declared with it, run for every call; a
stage's, registered with ``call.on_finish`` when it applies. The request's one owner,
``gateway.lifecycle.live``, finishes the call exactly once, after the client has its answer (a
stream: once it ended, however it ended), so settling never delays the client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from gateway.compiled import CompiledPolicy
from gateway.errors import GatewayError
from gateway.policy import ApiKey, Policy
from gateway.replicas.state import ReplicaState

logger = logging.getLogger("sortyard.pipeline")


class Endpoint(Enum):
    """An OpenAI API operation the gateway proxies; the value is the upstream path (under the replica's
    ``base_url``). A pass-through route's path is the call's own (``Call.path``, at the replica's origin)."""

    CHAT = "/chat/completions"
    COMPLETIONS = "/completions"
    EMBEDDINGS = "/embeddings"
    RESPONSES = "/responses"
    PASSTHROUGH = ""

    @property
    def operation(self) -> str:
        """The GenAI semantic-convention operation name."""
        return _OPERATIONS[self]


_OPERATIONS = {
    Endpoint.CHAT: "chat",
    Endpoint.COMPLETIONS: "text_completion",
    Endpoint.EMBEDDINGS: "embeddings",
    Endpoint.RESPONSES: "responses",
    Endpoint.PASSTHROUGH: "passthrough",
}


@dataclass(slots=True)
class Usage:
    """Tokens one response used, as the upstream reported them."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(slots=True)
class BytesResult:
    """A complete response body."""

    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass(slots=True)
class StreamResult:
    """A response streamed as server-sent events."""

    events: AsyncIterator[bytes]
    status: int = 200
    content_type: str = "text/event-stream"


Finisher = Callable[["Call", GatewayError | None], Awaitable[None]]
ResultFilter = Callable[["Call", "BytesResult | StreamResult"], Awaitable["BytesResult | StreamResult"]]


class UpstreamSpan(Protocol):
    """One upstream attempt's span (``gateway.telemetry.tracing.AttemptSpan``)."""

    @property
    def traceparent(self) -> str: ...

    def record_output(self, content: list[Any]) -> None: ...

    def end(self, call: Call, error: BaseException | None = None) -> None: ...


class CallSpan(Protocol):
    """What the pipeline and its stages ask of a sampled request's span
    (``gateway.telemetry.tracing.RequestSpan``; the request's owner starts and ends it)."""

    @property
    def captures_content(self) -> bool: ...

    def describe_call(self, call: Call) -> None: ...

    async def run_stage(self, stage: Stage, call: Call) -> None: ...

    def start_attempt(self, call: Call, model: str, label: str, attempt: int) -> UpstreamSpan: ...


@dataclass(slots=True)
class Call:
    """Everything the pipeline knows about one request."""

    endpoint: Endpoint
    body: dict[str, Any]
    """The decoded request body; forwarded with unknown fields intact."""
    headers: Mapping[str, str]
    """The client's request headers (names in lower case)."""
    compiled: CompiledPolicy
    """The policy this request runs under, even if a reload happens meanwhile."""
    request_id: str
    model: str
    """The model name the client asked for (responses report this name)."""
    is_stream: bool = False
    include_usage: bool = False
    key: ApiKey | None = None
    """The caller's key (None when the policy lets anonymous calls through)."""
    tenant: str = "anonymous"
    num_prompt_tokens: int | None = None
    """Prompt tokens as the gateway counted them (tiktoken), when a stage needed them."""
    num_events: int = 0
    """Stream events relayed to the client (an output-token estimate when usage never came)."""
    cache_status: str | None = None
    """``hit`` | ``miss`` | ``bypass`` when the response cache looked at this call."""
    route_reason: str | None = None
    """Why this pool was chosen (``alias``, ``learned p(large)=0.81``, ...)."""
    attempts: int = 0
    """Upstream attempts made (retries included)."""
    span: CallSpan | None = None
    """The request's tracing span when it is sampled."""
    peer: str | None = None
    """The socket peer's address as the server gave it (the client, or the proxy in front of it)."""
    path: str | None = None
    """The path the client asked for (a pass-through route is sent to the same path upstream)."""
    result_filters: list[ResultFilter] = field(default_factory=list)
    """Applied to the result after the stages (a cache tapping a stream, embeddings merging)."""
    guards_output: bool = False
    """Output guardrails apply (``gateway.stages.guardrails``): the answer is redacted or blocked by a
    result filter, so nothing may record it before (a span's captured content)."""
    is_background: bool = False
    """Background work (a batch line): it leaves its pool's ``queue.interactive_reserve`` slots free."""
    started_at: float = field(default_factory=time.perf_counter)
    pool: str | None = None
    replica: ReplicaState | None = None
    result: BytesResult | StreamResult | None = None
    usage: Usage | None = None
    finish_reasons: list[str] = field(default_factory=list)
    response_headers: dict[str, str] = field(default_factory=dict)
    upstream_s: float = 0.0
    """Seconds spent waiting on the upstream (for the gateway-overhead metric)."""
    first_token_at: float | None = None
    error: GatewayError | None = None
    _finishers: list[Finisher] = field(default_factory=list)
    _is_finished: bool = False

    @property
    def policy(self) -> Policy:
        """The policy as written (``compiled.policy``)."""
        return self.compiled.policy

    @property
    def deadline(self) -> float:
        """When (``time.perf_counter``) the request's time is up: its start plus its pool's ``total_s``.
        Waiting for a slot, retrying and waiting for an identical request in flight all spend it."""
        policy = self.compiled.policy
        timeouts = policy.timeouts_for(self.pool) if self.pool is not None else policy.timeouts
        return self.started_at + timeouts.total_s

    @property
    def priority(self) -> int | None:
        """Where the request queues (lower runs first): the policy's priority for its key or tenant, or
        the client's own when its key may set one (``allow_client_priority``), never before the
        policy's. None when neither says."""
        floor = self.compiled.policy.priority_for(self.key, self.tenant)
        given = self.body.get("priority")  # there only when the key allows it (gateway.authentication)
        if not isinstance(given, int) or isinstance(given, bool):
            return floor
        return given if floor is None else max(given, floor)

    @property
    def served_pool(self) -> str | None:
        """The pool whose replica answered: a fallback's when one served, else the pool asked for."""
        return self.replica.pool if self.replica is not None else self.pool

    def on_finish(self, finisher: Finisher) -> None:
        """Run ``finisher`` once when the response is over (in reverse order of registration)."""
        self._finishers.append(finisher)

    async def finish(self, error: GatewayError | None = None) -> None:
        """End the call: run every finisher (the request's owner calls this once, at its end)."""
        if self._is_finished:
            raise RuntimeError(f"request {self.request_id} was finished twice")
        self._is_finished = True
        if error is not None:
            self.error = error
        for finisher in reversed(self._finishers):
            try:
                await finisher(self, self.error)
            except Exception:  # a finisher's bug must not hide the response or skip the others
                logger.exception("finisher failed")


class Stage(Protocol):
    """One step of the pipeline. A stage with an ``endpoints`` attribute (a set of ``Endpoint``) runs
    only for calls to those endpoints; the others run for every call."""

    name: str

    async def __call__(self, call: Call) -> None: ...


class Pipeline:
    """Runs the stages in their declared order until one produces a result, then the result filters;
    ``finishers`` run when every call is over (after the stages' own). Each endpoint's walk is worked
    out once here, so a stage for one endpoint costs the others nothing."""

    def __init__(self, stages: Sequence[Stage], *, finishers: Sequence[Finisher] = ()) -> None:
        self.stages = tuple(stages)
        self.finishers = tuple(finishers)
        self._walks = {
            endpoint: tuple(s for s in self.stages if endpoint in getattr(s, "endpoints", (endpoint,)))
            for endpoint in Endpoint
        }

    async def run(self, call: Call) -> BytesResult | StreamResult:
        for finisher in self.finishers:
            call.on_finish(finisher)  # registered first: they run last, once every stage's has run
        span = call.span
        if span is not None:
            span.describe_call(call)
        stages = self._walks[call.endpoint]
        if span is None:  # not traced: the plain walk
            for stage in stages:
                await stage(call)
                if call.result is not None:
                    break
        else:  # traced: each stage in its own child span
            for stage in stages:
                await span.run_stage(stage, call)
                if call.result is not None:
                    break
        if call.result is None:
            raise GatewayError("no stage produced a response")
        result = call.result
        for result_filter in call.result_filters:
            result = await result_filter(call, result)
        return result
