"""Retries before the first byte, over an in-memory upstream: another replica, bounded attempts, the
deadline, and every failed attempt reported."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from gateway.errors import (
    GatewayError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from gateway.pipeline import BytesResult, Call
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.stages.pick import PickReplica
from gateway.stages.retry import CallWithRetries
from gateway.stages.upstream import CallUpstream
from gateway.telemetry.metrics import Metrics
from tests.support.calls import (
    balancer_for,
    build_call,
    chat_completion,
    compile_doc,
    policy_doc,
    served_model,
)

OK = Reply.json(chat_completion(served_model("small")))


class Replicas:
    """Answers the attempts in turn from a script of replies and errors (the last one repeats), and
    records which replica (host) each attempt reached."""

    def __init__(self, *script: Reply | Exception) -> None:
        self.script = list(script)
        self.hosts: list[str] = []

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        self.hosts.append(url.split("/")[2].removesuffix(".test"))
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _stage(
    call: Call, replicas: Replicas, *, clock_s: float | None = None
) -> tuple[CallWithRetries, list[float], list[tuple[str, GatewayError]]]:
    balancer = balancer_for(call.compiled)
    sleeps: list[float] = []
    failures: list[tuple[str, GatewayError]] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)  # backoff recorded, never waited for

    stage = CallWithRetries(
        PickReplica(balancer),
        CallUpstream(MemoryUpstreamClient(replicas), balancer),
        clock=(lambda: clock_s) if clock_s is not None else (lambda: call.started_at),
        sleep=sleep,
        rng=random.Random(0),
        on_attempt_error=lambda pool, error: failures.append((pool, error)),
    )
    return stage, sleeps, failures


def _call(**retry: object) -> Call:
    return build_call(policy_doc(num_replicas=2, retry={"backoff_s": 0.1, **retry}))


@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=500),
        Reply.json({"error": {"message": "slow down"}}, status=429),
        UpstreamConnectError("refused"),
    ],
    ids=["5xx", "429", "connect"],
)
async def test_a_failed_attempt_is_retried_on_the_other_replica(failure: Reply | Exception) -> None:
    call = _call()
    replicas = Replicas(failure, OK)
    stage, sleeps, failures = _stage(call, replicas)
    await stage(call)
    assert isinstance(call.result, BytesResult) and call.attempts == 2
    assert sorted(replicas.hosts) == ["small-0", "small-1"]
    assert len(sleeps) == 1 and 0.05 <= sleeps[0] <= 0.15  # backoff_s with +-50% jitter
    assert [pool for pool, _ in failures] == ["small"]  # the retried attempt is reported


async def test_attempts_are_bounded_and_the_last_failure_is_the_calls_own() -> None:
    call = _call(max_attempts=3)
    stage, sleeps, failures = _stage(call, Replicas(Reply(status=500), Reply(status=502)))
    with pytest.raises(UpstreamError) as raised:
        await stage(call)
    assert call.attempts == 3 and len(sleeps) == 2
    assert len(failures) == 2 and all(error is not raised.value for _, error in failures)


async def test_a_client_error_is_not_retried() -> None:
    call = _call()
    rejected = Reply.json({"error": {"message": "bad", "type": "invalid_request_error"}}, status=400)
    stage, sleeps, failures = _stage(call, Replicas(rejected, OK))
    with pytest.raises(UpstreamStatusError):
        await stage(call)
    assert call.attempts == 1 and sleeps == [] and failures == []


async def test_no_retry_once_the_backoff_would_pass_the_deadline() -> None:
    call = _call()
    total_s = call.policy.timeouts.total_s
    stage, sleeps, _ = _stage(call, Replicas(Reply(status=500), OK), clock_s=call.started_at + total_s - 0.01)
    with pytest.raises(UpstreamError):
        await stage(call)
    assert call.attempts == 1 and sleeps == []


@pytest.mark.parametrize("on_timeout", [False, True])
async def test_a_timeout_is_retried_only_with_on_timeout(on_timeout: bool) -> None:
    call = _call(on_timeout=on_timeout)
    stage, _, failures = _stage(call, Replicas(UpstreamTimeout("slow"), OK))
    if on_timeout:
        await stage(call)
        assert call.attempts == 2 and [type(e) for _, e in failures] == [UpstreamTimeout]
    else:
        with pytest.raises(UpstreamTimeout):
            await stage(call)
        assert call.attempts == 1 and failures == []  # the call's own error is counted with the call


async def test_a_lone_replica_is_tried_again() -> None:
    call = build_call(compile_doc(policy_doc(retry={"backoff_s": 0})))
    replicas = Replicas(Reply(status=503), OK)
    stage, _, _ = _stage(call, replicas)
    await stage(call)
    assert replicas.hosts == ["small-0", "small-0"] and call.attempts == 2


async def test_a_replica_that_answered_429_is_not_asked_again_and_its_retry_after_is_relayed() -> None:
    """It asked for seven seconds: the other replica is tried, then the client hears the wait."""
    call = _call(max_attempts=3)
    limited = Reply.json({"error": {"message": "slow down"}}, status=429, retry_after="7")
    replicas = Replicas(limited)
    stage, _, _ = _stage(call, replicas)
    with pytest.raises(UpstreamStatusError) as raised:
        await stage(call)
    assert sorted(replicas.hosts) == ["small-0", "small-1"]  # not a third attempt on either
    assert raised.value.upstream_status == 429 and raised.value.headers == {"Retry-After": "7"}


async def test_a_lone_replica_that_answered_429_is_not_asked_again() -> None:
    call = build_call(compile_doc(policy_doc(retry={"backoff_s": 0})))
    replicas = Replicas(Reply.json({"error": {"message": "slow down"}}, status=429), OK)
    stage, _, _ = _stage(call, replicas)
    with pytest.raises(UpstreamStatusError):
        await stage(call)
    assert replicas.hosts == ["small-0"]


def _errors(metrics: Metrics) -> dict[str, float]:
    return {
        sample.labels["kind"]: sample.value
        for family in metrics.upstream_errors.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_metrics_count_every_failed_attempt_by_kind_and_the_calls_own_once() -> None:
    metrics = Metrics()
    for script in (
        [UpstreamConnectError("refused"), Reply(status=500), OK],  # two retried, then answered
        [Reply.json({"error": {"message": "slow down"}}, status=429), OK],
        [UpstreamTimeout("slow")],  # not retried: the call's own error only
    ):
        call = build_call(policy_doc(num_replicas=3, retry={"backoff_s": 0}))
        balancer = balancer_for(call.compiled)
        stage = CallWithRetries(
            PickReplica(balancer),
            CallUpstream(MemoryUpstreamClient(Replicas(*script)), balancer),
            on_attempt_error=metrics.count_upstream_error,
        )
        error: GatewayError | None = None
        try:
            await stage(call)
        except GatewayError as e:
            error = e
        metrics.record_call(call, error)  # what the pipeline's finisher does
    assert _errors(metrics) == {
        "upstream_connect_error": 1,
        "upstream_error": 1,
        "upstream_rate_limited": 1,
        "upstream_timeout": 1,
    }
