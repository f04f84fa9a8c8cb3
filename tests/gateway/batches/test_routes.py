"""The Files and Batch APIs through a real gateway on loopback, driven by the openai SDK's ``client.files``
and ``client.batches``: upload, create, run (each line through the pipeline to the fake upstream),
output files, counts, listing, tenants, cancel and expiry (an injected clock)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.batches import BatchFeature
from tests.gateway.batches.conftest import (
    KEY,
    OTHER,
    TEXT,
    Clock,
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


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream, clock: Clock
) -> Iterator[tuple[GatewayServer, BatchFeature]]:
    tmp = tmp_path_factory.mktemp("batches")
    document = policy_document(upstream, tmp / "files", max_lines=50, max_file_bytes=64 * 1024)
    server, feature = start_gateway(write(tmp, document), clock)
    yield server, feature
    server.stop()


@pytest.fixture
def gateway(served: tuple[GatewayServer, BatchFeature]) -> GatewayServer:
    return served[0]


def let_in_flight_finish(upstream: FakeUpstream, feature: BatchFeature, prefix: str, num_opened: int) -> None:
    """Open the gate for exactly the lines in flight, once each waits at it (``num_opened`` of this
    test's lines went through already), so no opening is left over for the next test."""
    runner = feature.runner

    def are_all_waiting() -> bool:
        return len(sent_prompts(upstream, prefix)) - num_opened == len(runner.in_flight)

    wait_for(are_all_waiting, what="every line in flight waiting upstream")
    upstream.open_gate(len(runner.in_flight))
    wait_for(lambda: not runner.in_flight, what="no line in flight")


def lines_of(content: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in content.splitlines() if line.strip()]


def test_a_batch_runs_every_line_through_the_gateway(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    sdk = client(gateway)
    uploaded = sdk.files.create(file=("evals.jsonl", batch_file(6, prefix="life")), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0 and uploaded.filename == "evals.jsonl"
    batch = sdk.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "nightly"},
    )
    assert batch.status in ("validating", "in_progress") and batch.metadata == {"run": "nightly"}
    assert batch.expires_at == batch.created_at + 24 * 3600

    done = wait_for(lambda: (b := sdk.batches.retrieve(batch.id)).status in FINAL and b, what="the batch")
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 6, 0)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    assert done.output_file_id and done.error_file_id is None

    output = lines_of(sdk.files.content(done.output_file_id).content)
    assert [line["custom_id"] for line in output] == [f"life-{i}" for i in range(6)]  # input order
    for line in output:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        response = line["response"]
        assert response["status_code"] == 200 and response["request_id"]
        assert response["body"]["choices"][0]["message"]["content"] == TEXT
    assert sorted(sent_prompts(upstream, "life")) == sorted(f"life prompt {i}" for i in range(6))

    ids = [f.id for f in sdk.files.list()]
    assert uploaded.id in ids and done.output_file_id in ids
    assert sdk.files.retrieve(done.output_file_id).purpose == "batch_output"
    assert batch.id in [b.id for b in sdk.batches.list(limit=100)]
    with pytest.raises(openai.BadRequestError):
        sdk.batches.cancel(batch.id)  # it is over
    with pytest.raises(openai.NotFoundError):
        sdk.batches.retrieve("batch_nonexistent")


def test_failed_lines_go_to_the_error_file(gateway: GatewayServer) -> None:
    sdk = client(gateway)
    lines = [
        {"custom_id": "ok", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "mixed ok"}]}},
        {"custom_id": "no-such-model", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "nope", "messages": [{"role": "user", "content": "mixed bad"}]}},
    ]  # fmt: skip
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    uploaded = sdk.files.create(file=("mixed.jsonl", data), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait_for(lambda: (b := sdk.batches.retrieve(batch.id)).status in FINAL and b, what="the batch")
    assert done.status == "completed" and done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    assert done.error_file_id is not None and done.output_file_id is not None
    (error,) = lines_of(sdk.files.content(done.error_file_id).content)
    assert error["custom_id"] == "no-such-model" and error["response"]["status_code"] == 404
    assert error["response"]["body"]["error"]["code"] == "model_not_found"


def test_an_upload_names_its_bad_line(gateway: GatewayServer) -> None:
    sdk = client(gateway)
    good = batch_file(2, prefix="bad").splitlines()
    cases = {
        b"not json": "Line 3: not a JSON object",
        good[0]: "Line 3: custom_id 'bad-0' is already on line 1",
        good[1].replace(b'"POST"', b'"GET"').replace(b"bad-1", b"bad-9"): "Line 3: method must be POST",
        good[1]
        .replace(b"/v1/chat/completions", b"/v1/embeddings")
        .replace(b"bad-1", b"bad-9"): "Line 3: url",
    }
    for third, message in cases.items():
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.files.create(file=("f.jsonl", b"\n".join([*good, third])), purpose="batch")
        error = caught.value.body
        assert isinstance(error, dict) and error["message"].startswith(message), error
        assert error["code"] == "invalid_batch_line"


def test_purpose_other_than_batch_is_a_400(gateway: GatewayServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway).files.create(file=("f.jsonl", batch_file(1)), purpose="fine-tune")
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "purpose"


def test_limits_from_the_policy(gateway: GatewayServer) -> None:
    sdk = client(gateway)
    with pytest.raises(openai.BadRequestError, match="Line 51: the file has more than 50 requests"):
        sdk.files.create(file=("f.jsonl", batch_file(51)), purpose="batch")
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.files.create(file=("f.jsonl", batch_file(600)), purpose="batch")
    assert caught.value.status_code == 413


def test_an_upload_past_the_route_bound_is_a_413_a_malformed_one_a_400(gateway: GatewayServer) -> None:
    """Past ``max_file_bytes`` and the multipart room around it, the route stops reading: still a 413."""
    big = batch_file(2000, prefix="big")  # ~300 KB: over 64 KiB + the 64 KiB of multipart room
    with pytest.raises(openai.APIStatusError) as caught:
        client(gateway).files.create(file=("f.jsonl", big), purpose="batch")
    assert caught.value.status_code == 413
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "request_too_large"
    malformed = httpx.post(
        f"{gateway.url}/v1/files",
        content=b"--x\r\nnot a part",
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "multipart/form-data; boundary=x"},
    )
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"


def test_another_tenants_file_and_batch_are_not_found(gateway: GatewayServer) -> None:
    mine = client(gateway)
    uploaded = mine.files.create(file=("f.jsonl", batch_file(1, prefix="tenant")), purpose="batch")
    batch = mine.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    theirs = client(gateway, OTHER)
    for attempt in (
        lambda: theirs.files.retrieve(uploaded.id),
        lambda: theirs.files.content(uploaded.id),
        lambda: theirs.files.delete(uploaded.id),
        lambda: theirs.batches.retrieve(batch.id),
        lambda: theirs.batches.cancel(batch.id),
        lambda: theirs.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert uploaded.id not in [f.id for f in theirs.files.list()]
    assert batch.id not in [b.id for b in theirs.batches.list()]
    assert mine.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        mine.files.retrieve(uploaded.id)


def test_batch_requests_are_checked(gateway: GatewayServer) -> None:
    sdk = client(gateway)
    uploaded = sdk.files.create(file=("f.jsonl", batch_file(1, prefix="check")), purpose="batch")
    bad: list[tuple[dict[str, Any], str]] = [
        ({"endpoint": "/v1/embeddings", "completion_window": "24h"}, "endpoint"),
        ({"endpoint": "/v1/chat/completions", "completion_window": "1h"}, "completion_window"),
        ({"endpoint": "/v1/chat/completions", "completion_window": ["24h"]}, "completion_window"),
        ({"endpoint": {"x": 1}, "completion_window": "24h"}, "endpoint"),
        ({"endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": {"k": 1}}, "metadata"),
    ]
    for fields, param in bad:
        response = httpx.post(
            f"{gateway.url}/v1/batches",
            json={"input_file_id": uploaded.id, **fields},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    response = httpx.post(
        f"{gateway.url}/v1/batches", content=b"{", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    assert httpx.get(f"{gateway.url}/v1/batches").status_code == 401


def test_cancel_keeps_what_finished(
    served: tuple[GatewayServer, BatchFeature], upstream: FakeUpstream
) -> None:
    gateway, feature = served
    sdk = client(gateway)
    data = batch_file(10, model="gated-model", prefix="cancel")
    uploaded = sdk.files.create(file=("cancel.jsonl", data), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_for(lambda: len(sent_prompts(upstream, "cancel")) == 4, what="four lines in flight")  # concurrency 4
    upstream.open_gate(1)
    wait_for(lambda: sdk.batches.retrieve(batch.id).request_counts.completed == 1, what="one line done")  # type: ignore[union-attr]
    cancelling = sdk.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    let_in_flight_finish(upstream, feature, "cancel", 1)  # they finish; no new line is claimed
    done = wait_for(lambda: (b := sdk.batches.retrieve(batch.id)).status in FINAL and b, what="cancelled")
    assert done.status == "cancelled" and done.cancelled_at and done.request_counts is not None
    sent = sent_prompts(upstream, "cancel")
    assert done.request_counts.completed == len(sent) < 10 and done.request_counts.total == 10
    assert done.output_file_id is not None
    assert len(lines_of(sdk.files.content(done.output_file_id).content)) == len(sent)
    assert sdk.batches.cancel(batch.id).status == "cancelled"  # again: nothing changes


def test_past_its_window_a_batch_expires_with_what_finished(
    served: tuple[GatewayServer, BatchFeature], upstream: FakeUpstream, clock: Clock
) -> None:
    gateway, feature = served
    sdk = client(gateway)
    uploaded = sdk.files.create(
        file=("late.jsonl", batch_file(8, model="gated-model", prefix="late")), purpose="batch"
    )
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_for(lambda: len(sent_prompts(upstream, "late")) == 4, what="four lines in flight")
    upstream.open_gate(2)
    wait_for(lambda: sdk.batches.retrieve(batch.id).request_counts.completed == 2, what="two lines done")  # type: ignore[union-attr]
    clock.offset_s += 24 * 3600 + 1
    try:
        done = wait_for(lambda: (b := sdk.batches.retrieve(batch.id)).status in FINAL and b, what="expired")
    finally:
        clock.offset_s = 0.0
        let_in_flight_finish(upstream, feature, "late", 2)  # their results come too late to count
    assert done.status == "expired" and done.expired_at and done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.total) == (2, 8)
    assert done.output_file_id is not None and done.error_file_id is not None
    assert len(lines_of(sdk.files.content(done.output_file_id).content)) == 2
    errors = lines_of(sdk.files.content(done.error_file_id).content)
    assert len(errors) == 6 and {e["error"]["code"] for e in errors} == {"batch_expired"}


def test_batches_are_listed_newest_first_a_page_at_a_time(gateway: GatewayServer) -> None:
    sdk = client(gateway, OTHER)  # a tenant of its own here: only these three batches
    made = []
    for i in range(3):
        uploaded = sdk.files.create(file=("p.jsonl", batch_file(1, prefix=f"page{i}")), purpose="batch")
        made.append(
            sdk.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id
        )
    first = sdk.batches.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    rest = sdk.batches.list(limit=2, after=first.data[-1].id)
    assert len(rest.data) == 1 and not rest.has_more
    listed = [b.id for b in [*first.data, *rest.data]]
    assert sorted(listed) == sorted(made)
    assert [b.id for b in sdk.batches.list(limit=1)] == listed  # the SDK follows the pages itself
