"""A batch line as a request: its priority class (after every interactive one, in the fair queue too),
which refusals mean "wait and run it again", and what is kept as its result."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.batches.exchange import BatchExchange, batch_priority, retry_after_s
from gateway.batches.jsonl import BatchLine
from gateway.compiled import compile_policy
from gateway.errors import (
    AuthenticationFailed,
    InvalidRequest,
    RateLimited,
    ServiceUnavailable,
    UpstreamStatusError,
    UpstreamTimeout,
)
from gateway.pipeline import BytesResult
from gateway.policy import Policy, parse_policy
from gateway.replicas.fair_queue import FairQueue

SHA = "a" * 64


def policy(**extra: Any) -> Policy:
    document = {
        "pools": {"small": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "m"}]}},
        **extra,
    }
    return parse_policy(document, "test")


def test_the_batch_class_comes_after_every_priority_the_policy_gives() -> None:
    assert batch_priority(policy()) == 1  # interactive requests without a priority queue as 0
    keyed = policy(
        keys=[{"sha256": SHA, "tenant": "acme", "priority": 7}], tenants={"globex": {"priority": 3}}
    )
    assert batch_priority(keyed) == 8
    assert batch_priority(policy(batches={"priority": 100})) == 100


def test_the_fair_queue_serves_interactive_classes_before_the_batch_class() -> None:
    lowest = batch_priority(policy(tenants={"acme": {"priority": 2}}))
    queue: FairQueue[str] = FairQueue()
    queue.push("batch line", "acme", priority=lowest)
    queue.push("another batch line", "globex", priority=lowest)
    queue.push("chat", "acme", priority=2)
    queue.push("anonymous chat", "anonymous", priority=0)
    order = []
    while (entry := queue.pop()) is not None:
        order.append(entry.item)
    assert order == ["anonymous chat", "chat", "batch line", "another batch line"]


@pytest.mark.parametrize(
    ("error", "wait"),
    [
        (RateLimited("Rate limit reached for requests per minute.", headers={"Retry-After": "7"}), 7.0),
        (RateLimited("Too many of your requests are waiting", code="queue_full"), 1.0),
        (ServiceUnavailable("store down", code="store_unavailable"), 1.0),
        (RateLimited("You exceeded your current quota", code="insufficient_quota"), None),
        (RateLimited("Request too large for the tokens per minute limit."), None),
        (UpstreamStatusError(429, b"{}", "slow down"), 1.0),
        (UpstreamStatusError(400, b"{}", "bad"), None),
        (InvalidRequest("bad"), None),
        (UpstreamTimeout("slow"), None),
    ],
)
def test_which_refusals_are_waited_out(error: Any, wait: float | None) -> None:
    assert retry_after_s(error) == wait


class _Gateway:
    class keys:  # the run-time key directory: empty
        @staticmethod
        def find(sha256: str) -> None:
            return None


def exchange() -> BatchExchange:
    line = BatchLine("a", msgspec.Raw(b'{"model": "m", "messages": []}'))
    return BatchExchange(_Gateway(), "/v1/chat/completions", SHA, line)  # type: ignore[arg-type]


async def test_an_answer_is_the_lines_result() -> None:
    made = exchange()
    await made.refuse(None, InvalidRequest("bad", param="x"))
    assert made.result is not None and made.result.status_code == 400 and made.retry_after_s is None
    assert msgspec.json.decode(made.result.body)["error"]["param"] == "x"


async def test_a_rate_limit_is_not_a_result() -> None:
    made = exchange()
    await made.refuse(None, RateLimited("slow down", headers={"Retry-After": "2"}))
    assert made.result is None and made.retry_after_s == 2.0


async def test_a_plain_body_that_is_not_json_is_kept_as_a_string() -> None:
    made = exchange()

    class _Call:
        request_id = "r1"

    status = await made.deliver(_Call(), BytesResult(502, b"<html>bad gateway</html>"))  # type: ignore[arg-type]
    assert status == 502 and made.result is not None
    assert msgspec.json.decode(made.result.body) == "<html>bad gateway</html>"


async def test_a_key_that_is_gone_fails_its_lines() -> None:
    compiled = compile_policy(policy(keys=[{"sha256": "b" * 64, "tenant": "acme"}]))
    with pytest.raises(AuthenticationFailed):
        await exchange().open(compiled, "r1", None)


async def test_a_line_runs_as_background_work() -> None:
    compiled = compile_policy(policy(keys=[{"sha256": SHA, "tenant": "acme"}]))
    line = BatchLine("a", msgspec.Raw(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'))
    made = BatchExchange(_Gateway(), "/v1/chat/completions", SHA, line)  # type: ignore[arg-type]
    call = await made.open(compiled, "r1", None)
    assert call.is_background and call.priority == batch_priority(compiled.policy)
