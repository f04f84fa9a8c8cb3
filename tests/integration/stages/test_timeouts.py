"""Upstream timeouts end to end: ``idle_s`` between stream chunks and ``total_s`` for the whole
exchange. Before the first byte a timeout is a plain 504; once a stream has started it ends with an
OpenAI-shaped error event and then ``data: [DONE]``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

MESSAGES: Any = [{"role": "user", "content": "hi"}]
CLIENT_TIMEOUT_S = 10.0
"""Far above every timeout under test: a timeout the gateway failed to apply shows as a client one."""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)

    def pool(model: str, *, idle_s: float, total_s: float) -> dict[str, Any]:
        timeouts = {"connect_s": 1, "first_byte_s": 5, "idle_s": idle_s, "total_s": total_s}
        return {"replicas": [{"base_url": upstream.base_url, "model": model}], "timeouts": timeouts}

    # each pool's other timeouts are far off, so only the one under test can fire
    # (short, yet with room for a loaded machine to deliver what precedes the timeout in time)
    document["pools"]["stall"] = pool("stall-stream", idle_s=0.5, total_s=60)  # 2 words, then silence
    document["pools"]["slowbody"] = pool("slow-body", idle_s=5, total_s=0.5)  # a body trickled over ~3 s
    document["pools"]["slowstream"] = pool("slow-stream", idle_s=5, total_s=0.8)  # an event per 50 ms, 10 s
    server = GatewayServer(write_policy(tmp_path_factory.mktemp("timeouts") / "p.yaml", document)).start()
    yield server
    server.stop()
    upstream.stop()


def _client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0, timeout=CLIENT_TIMEOUT_S
    )


def _events(gateway: GatewayServer, model: str) -> list[str]:
    """The data lines of a streamed chat request, as the client receives them."""
    body = {"model": model, "messages": MESSAGES, "stream": True}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [event for event in response.text.split("\n\n") if event]
    assert all(event.startswith("data: ") for event in events)
    return [event.removeprefix("data: ") for event in events]


def _assert_ends_with_timeout_then_done(events: list[str]) -> None:
    *_, error_event, done = events
    assert done == "[DONE]"
    error = json.loads(error_event)["error"]
    assert error["code"] == "upstream_timeout" and error["type"] == "server_error"
    assert set(error) == {"message", "type", "param", "code"} and "timed out" in error["message"]


def test_a_stream_that_stalls_past_idle_s_ends_with_an_error_event_then_done(gateway: GatewayServer) -> None:
    events = _events(gateway, "stall")
    contents = [
        choice["delta"].get("content") for event in events[:-2] for choice in json.loads(event)["choices"]
    ]
    assert contents == ["", "Hello", " from"]  # what came before the stall reached the client
    _assert_ends_with_timeout_then_done(events)

    stream = _client(gateway).chat.completions.create(model="stall", messages=MESSAGES, stream=True)
    received = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert received == ["", "Hello", " from"]
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "upstream_timeout"


def test_a_response_slower_than_total_s_is_504(gateway: GatewayServer) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        _client(gateway).chat.completions.create(model="slowbody", messages=MESSAGES)
    assert info.value.status_code == 504
    assert info.value.code == "upstream_timeout" and info.value.type == "server_error"


def test_a_stream_longer_than_total_s_ends_with_an_error_event_then_done(gateway: GatewayServer) -> None:
    events = _events(gateway, "slowstream")
    assert len(events) > 2 and json.loads(events[0])["choices"][0]["delta"]["content"] == "t0 "
    _assert_ends_with_timeout_then_done(events)
