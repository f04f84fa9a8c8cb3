"""gateway/lifecycle.py: one owner for a request's end, the same for every way a request arrives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.app import create_app
from gateway.compiled import CompiledPolicy
from gateway.errors import AuthenticationFailed, ClientDisconnected, GatewayError, UpstreamError
from gateway.instance import Gateway
from gateway.lifecycle import Observer, live, new_call
from gateway.pipeline import BytesResult, Call, Endpoint, Pipeline, StreamResult
from gateway.settings import Settings
from gateway.telemetry.access_log import AccessLog
from gateway.telemetry.spans import RequestSpan
from gateway.telemetry.tracing import GatewayTracer
from tools.servers.gateway_server import fake_policy, write_policy

BODY = msgspec.json.encode({"model": "small", "messages": [{"role": "user", "content": "hi"}]})


class Exchange:
    """An exchange that records what the request's owner asked of it."""

    endpoint = Endpoint.CHAT
    scope: Mapping[str, Any] = {"method": "POST", "path": "/v1/chat/completions"}

    def __init__(self, refuse_with: GatewayError | None = None) -> None:
        self.headers: dict[str, str] = {}
        self.id_headers = self.headers
        self.refuse_with = refuse_with
        self.delivered: list[BytesResult | StreamResult] = []
        self.refused: list[GatewayError] = []
        self.client_left = False
        self.closed = 0

    async def open(self, compiled: CompiledPolicy, request_id: str, span: RequestSpan | None) -> Call:
        if self.refuse_with is not None:
            raise self.refuse_with
        return new_call(Endpoint.CHAT, self.headers, BODY, compiled, request_id, 0.0)

    async def deliver(self, call: Call, result: BytesResult | StreamResult) -> int:
        self.delivered.append(result)
        return result.status

    async def refuse(self, call: Call | None, error: GatewayError) -> None:
        self.refused.append(error)

    def is_client_gone(self) -> bool:
        if not self.client_left:
            return False
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()
        return True

    def close(self) -> None:
        self.closed += 1


class Stage:
    """One stage doing what a test says: answer, fail, or wait until cancelled."""

    name = "test"

    def __init__(self, do: str) -> None:
        self.do = do
        self.started = asyncio.Event()

    async def __call__(self, call: Call) -> None:
        self.started.set()
        if self.do == "answer":
            call.result = BytesResult(200, b"{}")
        elif self.do == "fail":
            raise UpstreamError("the upstream failed")
        elif self.do == "bug":
            raise RuntimeError("a bug")
        else:
            await asyncio.Event().wait()


@pytest.fixture
def gateway(tmp_path: Path) -> Gateway:
    path = write_policy(tmp_path / "policy.yaml", fake_policy("http://127.0.0.1:9/v1"))
    return create_app(Settings(policy_path=str(path))).gateway


def run_with(gateway: Gateway, stage: Stage) -> list[GatewayError | None]:
    """The gateway's pipeline replaced by ``stage``; the errors its one finisher saw, in order."""
    seen: list[GatewayError | None] = []

    async def finisher(call: Call, error: GatewayError | None) -> None:
        seen.append(error)

    gateway.pipeline = Pipeline([stage], finishers=[finisher])
    return seen


def observer() -> tuple[Observer, list[bytes]]:
    lines: list[bytes] = []
    return Observer(GatewayTracer(None), AccessLog(lines.append)), lines


async def test_an_answer_is_delivered_then_the_call_finished_once(gateway: Gateway) -> None:
    seen = run_with(gateway, Stage("answer"))
    watch, lines = observer()
    exchange = Exchange()
    await live(gateway, watch, exchange)
    assert len(exchange.delivered) == 1 and exchange.refused == [] and exchange.closed == 1
    assert seen == [None]
    assert json.loads(lines[0])["status"] == 200
    assert gateway.inflight.num_open == 0


async def test_a_stage_that_fails_is_refused_and_its_error_reaches_the_finishers(gateway: Gateway) -> None:
    seen = run_with(gateway, Stage("fail"))
    watch, lines = observer()
    exchange = Exchange()
    await live(gateway, watch, exchange)
    assert [type(e) for e in exchange.refused] == [UpstreamError] and exchange.delivered == []
    assert [type(e) for e in seen] == [UpstreamError]
    assert json.loads(lines[0])["status"] == 502


async def test_a_bug_is_an_openai_shaped_500_and_still_finishes(gateway: Gateway) -> None:
    seen = run_with(gateway, Stage("bug"))
    exchange = Exchange()
    await live(gateway, None, exchange)
    assert [e.status for e in exchange.refused] == [500] and [e.status for e in seen if e] == [500]


async def test_a_request_refused_before_its_call_is_counted_and_never_finished(gateway: Gateway) -> None:
    seen = run_with(gateway, Stage("answer"))
    watch, lines = observer()
    exchange = Exchange(refuse_with=AuthenticationFailed("no key"))
    await live(gateway, watch, exchange)
    assert [type(e) for e in exchange.refused] == [AuthenticationFailed] and seen == []
    entry = json.loads(lines[0])
    assert entry["status"] == 401 and entry["error"] == "invalid_api_key"
    metrics = gateway.metrics.requests.labels("chat", "-", "401")
    assert metrics._value.get() == 1


async def test_a_client_that_leaves_is_a_499_with_nothing_sent(gateway: Gateway) -> None:
    stage = Stage("wait")
    seen = run_with(gateway, stage)
    watch, lines = observer()
    exchange = Exchange()
    task = asyncio.create_task(live(gateway, watch, exchange))
    await stage.started.wait()
    exchange.client_left = True
    task.cancel()
    await task  # absorbed: the request ended, it was not the server stopping
    assert [type(e) for e in exchange.refused] == [ClientDisconnected]  # the exchange sends nothing
    assert [type(e) for e in seen] == [ClientDisconnected]
    assert json.loads(lines[0])["status"] == 499 and gateway.inflight.num_open == 0


async def test_a_server_stopping_cancels_yet_the_call_still_finishes(gateway: Gateway) -> None:
    stage = Stage("wait")
    seen = run_with(gateway, stage)
    task = asyncio.create_task(live(gateway, None, Exchange()))
    await stage.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [type(e) for e in seen] == [ClientDisconnected] and gateway.inflight.num_open == 0


async def test_a_call_finished_twice_is_a_bug_not_a_silent_repeat(gateway: Gateway) -> None:
    call = new_call(Endpoint.CHAT, {}, BODY, gateway.compiled, "req", 0.0)
    await call.finish()
    with pytest.raises(RuntimeError, match="finished twice"):
        await call.finish()
