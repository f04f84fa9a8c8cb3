"""Batch runners sharing one batch: two gateways on one real Redis run every line exactly once, a gateway
stopped mid-batch hands its lines to the one that starts after it, and every batch call runs in the
lowest priority class."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types import Batch

from gateway.batches import BatchFeature, batch_priority
from tests.gateway.batches.conftest import (
    REDIS_ENV,
    batch_file,
    client,
    policy_document,
    sent_prompts,
    start_gateway,
    wait_for,
    write,
)
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer

FINAL = {"completed", "failed", "expired", "cancelled"}


@pytest.fixture
def shared_policy(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    monkeypatch.setenv(REDIS_ENV, redis_flushed)
    return write(tmp_path, policy_document(upstream, tmp_path / "files", redis=True, concurrency=4))


@pytest.fixture
def gateways(shared_policy: Path) -> Iterator[list[tuple[GatewayServer, BatchFeature]]]:
    started: list[tuple[GatewayServer, BatchFeature]] = []
    yield started
    for server, _ in started:
        server.stop()


def submit(sdk: openai.OpenAI, name: str, data: bytes) -> Batch:
    """Upload ``data`` as a batch file and make a batch of it (chat completions, 24 h)."""
    uploaded = sdk.files.create(file=(name, data), purpose="batch")
    return sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def recorded_ids(server: GatewayServer, file_id: str) -> list[str]:
    content = client(server).files.content(file_id).content
    return [json.loads(line)["custom_id"] for line in content.splitlines() if line.strip()]


def lines_counted(server: GatewayServer, outcome: str) -> float:
    registry = server.gateway.metrics.registry
    return registry.get_sample_value("sortyard_batch_lines_total", {"outcome": outcome}) or 0.0


def test_two_gateways_share_one_batch_each_line_once(
    shared_policy: Path, gateways: list[tuple[GatewayServer, BatchFeature]], upstream: FakeUpstream
) -> None:
    gateways += [start_gateway(shared_policy), start_gateway(shared_policy)]
    (first, first_batches), (second, second_batches) = gateways
    batch = submit(client(first), "two.jsonl", batch_file(24, model="gated-model", prefix="two"))
    # each claims as many lines as it has room for (4), so both hold some before any line finishes
    wait_for(
        lambda: len(first_batches.runner.in_flight) == len(second_batches.runner.in_flight) == 4,
        what="both busy",
    )
    upstream.open_gate(24)
    done = wait_for(
        lambda: (b := client(second).batches.retrieve(batch.id)).status in FINAL and b, what="the batch"
    )
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (24, 0)
    assert done.output_file_id is not None
    assert recorded_ids(first, done.output_file_id) == [f"two-{i}" for i in range(24)]
    # the upstream's log: each line's body once, across both gateways
    assert Counter(sent_prompts(upstream, "two")) == Counter(f"two prompt {i}" for i in range(24))
    runs = len(first_batches.runner.priorities) + len(second_batches.runner.priorities)
    assert runs == 24 and first_batches.runner.priorities and second_batches.runner.priorities
    recorded = [lines_counted(server, "recorded") for server in (first, second)]
    assert sum(recorded) == 24 and all(recorded)  # on each gateway's /metrics registry


def test_a_restarted_gateway_resumes_the_batch(
    shared_policy: Path, gateways: list[tuple[GatewayServer, BatchFeature]], upstream: FakeUpstream
) -> None:
    gateways.append(start_gateway(shared_policy))
    first = gateways[0][0]
    batch = submit(client(first), "restart.jsonl", batch_file(10, model="gated-model", prefix="restart"))
    wait_for(lambda: len(sent_prompts(upstream, "restart")) == 4, what="four lines claimed and in flight")
    first.stop()  # its four lines are cancelled and handed back
    gateways.pop()
    gateways.append(start_gateway(shared_policy))
    second = gateways[0][0]
    # ten for the lines, four for the requests the stopped gateway left waiting upstream (the fake
    # answers a request whose client left, to nobody)
    upstream.open_gate(14)
    done = wait_for(
        lambda: (b := client(second).batches.retrieve(batch.id)).status in FINAL and b, what="the batch"
    )
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (10, 10)
    assert done.output_file_id is not None
    assert recorded_ids(second, done.output_file_id) == [f"restart-{i}" for i in range(10)]  # each once
    sent = Counter(sent_prompts(upstream, "restart"))
    assert sum(sent.values()) == 14 and sum(1 for n in sent.values() if n == 2) == 4  # the four ran again
    assert lines_counted(second, "recorded") == 10


def test_batch_calls_run_in_the_lowest_priority_class(
    shared_policy: Path, gateways: list[tuple[GatewayServer, BatchFeature]], upstream: FakeUpstream
) -> None:
    gateways.append(start_gateway(shared_policy))
    server, feature = gateways[0]
    lowest = batch_priority(server.gateway.policy)
    assert lowest == 6  # one past the key with priority 5: after every interactive class
    batch = submit(client(server), "p.jsonl", batch_file(3, prefix="prio"))
    wait_for(lambda: client(server).batches.retrieve(batch.id).status == "completed", what="the batch")
    assert list(feature.runner.priorities) == [lowest] * 3  # the Call's priority, as the fair queue reads it
    sent = [body for body in list(upstream.requests) if "prio prompt" in json.dumps(body.get("messages"))]
    assert [body.get("priority") for body in sent] == [lowest] * 3  # and as the engine gets it


def test_a_saturated_pool_serves_an_interactive_request_before_queued_batch_lines(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    document = policy_document(upstream, tmp_path / "files", concurrency=3)
    document["routing"] = {
        "pools": {"gated": {"max_outstanding_per_replica": 1, "queue": {"max_wait_s": 30}}}
    }
    server, _ = start_gateway(write(tmp_path, document))
    try:
        queue_of = next(
            stage for stage in server.gateway.pipeline.stages if stage.name == "upstream"
        ).pick.queues

        def num_waiting() -> int:
            queue = queue_of.queues.get("gated")
            return len(queue.waiting) if queue is not None else 0

        sdk = client(server)
        batch = submit(sdk, "q.jsonl", batch_file(3, model="gated-model", prefix="queued"))
        wait_for(
            lambda: len(sent_prompts(upstream, "queued")) == 1 and num_waiting() == 2,
            what="one line served, two queued",
        )
        answers: list[str] = []
        interactive = threading.Thread(
            target=lambda: answers.append(
                str(
                    sdk.chat.completions.create(
                        model="gated-model",
                        messages=[{"role": "user", "content": "queued prompt interactive"}],
                    )
                    .choices[0]
                    .message.content
                )
            )
        )
        interactive.start()
        wait_for(lambda: num_waiting() == 3, what="the interactive request queued behind the lines")
        upstream.open_gate(1)  # the slot frees: the interactive class goes first
        wait_for(lambda: len(sent_prompts(upstream, "queued")) == 2, what="the next request upstream")
        upstream.open_gate(3)
        interactive.join(30)
        wait_for(lambda: sdk.batches.retrieve(batch.id).status == "completed", what="the batch")
    finally:
        server.stop()
    order = sent_prompts(upstream, "queued")
    assert order[1] == "queued prompt interactive" and sorted(order[2:]) == [
        "queued prompt 1",
        "queued prompt 2",
    ]
    assert answers and answers[0]


def test_a_rate_limited_line_waits_and_runs_again(tmp_path: Path, upstream: FakeUpstream) -> None:
    document = policy_document(upstream, tmp_path / "files", concurrency=4)
    document["keys"][0]["limits"] = {"max_concurrent": 1}  # the batch's key: one request at a time
    server, feature = start_gateway(write(tmp_path, document))
    try:
        sdk = client(server)
        batch = submit(sdk, "rl.jsonl", batch_file(3, prefix="limited"))
        done = wait_for(lambda: (b := sdk.batches.retrieve(batch.id)).status in FINAL and b, what="the batch")
    finally:
        server.stop()
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 0)  # 429s were waited out
    assert Counter(sent_prompts(upstream, "limited")) == Counter(f"limited prompt {i}" for i in range(3))
    assert len(feature.runner.priorities) > 3  # some runs were refused by the key's limit, and retried


def test_a_batch_made_or_cancelled_wakes_the_runner_before_its_next_poll(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """With an hour between polls, a new batch still runs at once, and a cancel ends its batch at once."""
    document = policy_document(upstream, tmp_path / "files", poll_interval_s=3600)
    server, _ = start_gateway(write(tmp_path, document))
    try:
        api = client(server)
        made = submit(api, "w.jsonl", batch_file(2, prefix="wake"))
        wait_for(lambda: api.batches.retrieve(made.id).status == "completed", what="the new batch to run")
    finally:
        server.stop()
    idle = policy_document(upstream, tmp_path / "files", poll_interval_s=3600, concurrency=0)
    server, _ = start_gateway(write(tmp_path, idle))  # it runs no lines: the batch waits for a cancel
    try:
        api = client(server)
        made = submit(api, "c.jsonl", batch_file(2, prefix="wake"))
        assert api.batches.cancel(made.id).status == "cancelling"
        wait_for(lambda: api.batches.retrieve(made.id).status == "cancelled", what="the cancel to end it")
    finally:
        server.stop()
