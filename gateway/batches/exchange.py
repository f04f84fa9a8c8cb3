"""``BatchExchange``: one batch line as a request of ``gateway.lifecycle.live``, the owner every HTTP
and WebSocket request has, so a line passes the same stages (routing, limits and budgets, cache,
retries, the fair queue) as the request a client would send.

What differs is how it arrives and where its answer goes: its body is the line's (never streamed),
its caller is the batch creator's key (looked up again for each line: a revoked key fails its lines),
it runs in the lowest priority class (``batch_priority``: interactive requests go first, in the fair
queue and in engines that schedule by ``priority``), and its answer is kept as the line's result. A
429 that waiting cures (a rate limit, a saturated pool's full queue, a replica's 429) or a 503 is
not a result: the line is handed back and run again later (``retry_after_s``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from gateway.batches.jsonl import ENDPOINTS, BatchLine
from gateway.batches.records import LineResult
from gateway.compiled import CompiledPolicy
from gateway.errors import (
    AuthenticationFailed,
    GatewayError,
    RateLimited,
    ServiceUnavailable,
    UpstreamStatusError,
    render,
)
from gateway.lifecycle import new_call
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.policy import ApiKey, Policy
from gateway.telemetry.spans import RequestSpan

if TYPE_CHECKING:
    from gateway.instance import Gateway

__all__ = ["BatchExchange", "batch_priority", "retry_after_s"]

_NO_HEADERS: dict[str, str] = {}
MAX_RETRY_AFTER_S = 60.0


def batch_priority(policy: Policy) -> int:
    """The batch class: the policy's ``batches.priority``, and later than every priority it gives a key
    or tenant (lower runs first)."""
    given = [key.priority for key in policy.keys if key.priority is not None]
    given += [tenant.priority for tenant in policy.tenants.values() if tenant.priority is not None]
    return max([policy.batches.priority, *(priority + 1 for priority in given)])


def retry_after_s(error: GatewayError) -> float | None:
    """Seconds to wait before running the line again, or None when the error is its result: a budget
    spent or a request too large for its limit never passes by waiting."""
    if isinstance(error, RateLimited):
        if error.code == "insufficient_quota" or error.message.startswith("Request too large"):
            return None
    elif isinstance(error, UpstreamStatusError):
        if error.upstream_status != 429:  # the replica's own rate limit: wait it out too
            return None
    elif not isinstance(error, ServiceUnavailable):
        return None
    try:
        wait = float(error.headers.get("Retry-After", "1"))
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.05), MAX_RETRY_AFTER_S)


class BatchExchange:
    """One batch line's arrival (``gateway.lifecycle.Exchange``): after ``live`` returns, ``result`` is
    the line's answer, or ``retry_after_s`` says to run it again later."""

    def __init__(self, gateway: Gateway, url: str, key_sha256: str | None, line: BatchLine) -> None:
        self.gateway = gateway
        self.endpoint: Endpoint = ENDPOINTS[url]
        self.key_sha256 = key_sha256
        self.line = line
        self.headers: Mapping[str, str] = _NO_HEADERS
        self.id_headers: Mapping[str, str] = _NO_HEADERS  # each line its own request id
        self.scope: Mapping[str, Any] = {"method": "POST", "path": url}
        self.result: LineResult | None = None
        self.retry_after_s: float | None = None
        self.priority: int | None = None
        """The priority class the line ran in (``Call.priority``), once opened."""
        self._request_id = ""

    def _key(self, compiled: CompiledPolicy) -> ApiKey | None:
        if self.key_sha256 is None:
            if compiled.policy.auth.required:
                raise AuthenticationFailed("The batch was made without an API key; this policy requires one.")
            return None
        key = compiled.keys.by_hash.get(self.key_sha256) or self.gateway.keys.find(self.key_sha256)
        if key is None:
            raise AuthenticationFailed("The API key that made this batch is no longer valid.")
        return key

    async def open(self, compiled: CompiledPolicy, request_id: str, span: RequestSpan | None) -> Call:
        self._request_id = request_id
        raw = bytes(self.line.body)
        call = new_call(
            self.endpoint,
            self.headers,
            raw,
            compiled,
            request_id,
            time.perf_counter(),
            key=self._key(compiled),
            span=span,
        )
        # the lowest class: a client's own (allowed) priority may only make it later still
        given = call.body.get("priority")
        lowest = batch_priority(compiled.policy)
        call.body["priority"] = max(given, lowest) if isinstance(given, int) else lowest
        self.priority = call.priority
        call.is_background = True  # it leaves the pool's interactive reserve alone
        return call

    async def deliver(self, call: Call, result: BytesResult | StreamResult) -> int:
        if isinstance(result, StreamResult):  # the file's check refuses streams: a bug
            aclose = getattr(result.events, "aclose", None)
            if aclose is not None:
                await aclose()
            raise GatewayError("A batch line was answered with a stream.")
        self.result = LineResult(call.request_id, result.status, _as_json(result.body))
        return result.status

    async def refuse(self, call: Call | None, error: GatewayError) -> None:
        wait = retry_after_s(error)
        if wait is not None:
            self.retry_after_s = wait
            return
        status, body, _ = render(error)
        self.result = LineResult(self._request_id, status, _as_json(body))

    def is_client_gone(self) -> bool:
        return False  # nobody leaves: a cancellation is the runner stopping

    def close(self) -> None:
        pass


def _as_json(body: bytes) -> msgspec.Raw:
    """The body as JSON for the output line: itself when it is JSON, else as a JSON string."""
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError:
        return msgspec.Raw(msgspec.json.encode(body.decode("utf-8", "replace")))
    return msgspec.Raw(body)
