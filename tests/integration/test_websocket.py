"""``GET /v1/ws`` through a real gateway on loopback: the ``websockets`` client, the fake upstream, Redis.

Every wait here is for a condition (a frame, a close, the upstream noticing, the gateway settled),
never for a guessed time; ``recv``'s timeout only bounds a test that would otherwise hang.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from gateway.keys.hashing import hash_key, new_key
from gateway.stores import RedisStore
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

ROOT = Path(__file__).resolve().parents[2]
USER = new_key()
LEDGER = new_key()
LIMITED = new_key()
ADMIN = new_key()
TEXT = "".join(FakeUpstream.WORDS)
USAGE = {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def _policy(upstream: FakeUpstream, **extra: Any) -> dict[str, Any]:
    document = fake_policy(upstream.base_url, **extra)
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(USER), "tenant": "ws", "name": "user"},
        {"sha256": hash_key(LEDGER), "tenant": "ws-ledger", "name": "ledger"},
        {
            "sha256": hash_key(LIMITED),
            "tenant": "ws-limited",
            "name": "limited",
            "limits": {"requests_per_minute": 1},
        },
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "admin", "admin": True},
    ]
    # a hung upstream is never cut by the gateway's own timeouts within a test: only the client ends it
    document["pools"]["hang"]["timeouts"] = {"first_byte_s": 600, "total_s": 600}
    return document


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream, redis_url: str
) -> Iterator[GatewayServer]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # the limited key's window starts empty
    client.close()
    path = write_policy(tmp_path_factory.mktemp("websocket") / "policy.yaml", _policy(upstream))
    server = GatewayServer(path, store=RedisStore(redis_url, timeout_s=0.5)).start()
    yield server
    server.stop()


def _connect(gateway: GatewayServer, key: str | None = USER, query: str = "") -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else None
    return connect(f"ws://127.0.0.1:{gateway.port}/v1/ws{query}", additional_headers=headers, proxy=None)


def _recv(ws: ClientConnection) -> dict[str, Any]:
    frame = json.loads(ws.recv(timeout=10))
    assert isinstance(frame, dict)
    return frame


def _is_last(frame: dict[str, Any]) -> bool:
    return "done" in frame or "error" in frame


def _answer(ws: ClientConnection) -> list[dict[str, Any]]:
    """The frames of one request's answer, its last (done or error) included."""
    frames = [_recv(ws)]
    while not _is_last(frames[-1]):
        frames.append(_recv(ws))
    return frames


def _closed_with(ws: ClientConnection) -> int | None:
    """The close code, once the gateway has closed the connection."""
    with pytest.raises(ConnectionClosed) as info:
        while True:
            ws.recv(timeout=10)
    return info.value.rcvd.code if info.value.rcvd is not None else None


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_a_prompt_streams_tokens_then_done_with_usage(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    with _connect(gateway, LEDGER) as ws:
        ws.send(json.dumps({"model": "small", "prompt": "Say hi", "max_tokens": 20, "temperature": 0.5}))
        frames = _answer(ws)
    *tokens, done = frames
    assert "".join(f["token"] for f in tokens) == TEXT
    assert done["done"] is True and done["finish_reason"] == "stop" and done["usage"] == USAGE
    assert done["request_id"]
    forwarded = upstream.requests[-1]
    assert forwarded["messages"] == [{"role": "user", "content": "Say hi"}]
    assert forwarded["stream"] is True and forwarded["max_tokens"] == 20 and forwarded["temperature"] == 0.5
    assert not {"prompt", "mode", "id", "api_key", "type"} & forwarded.keys()
    gateway.settle()  # accounted as an HTTP request is: the ledger has it
    usage = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert usage["tenants"]["ws-ledger"]["keys"]["ledger"] == {
        "requests": 1,
        "input_tokens": 11,
        "output_tokens": 6,
        "cost_usd": 0.0,
    }


def test_openai_mode_sends_the_sse_chunks(gateway: GatewayServer) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with _connect(gateway, query="?mode=openai") as ws:
        ws.send(json.dumps({"model": "gpt-4o-mini", "messages": messages}))
        *chunks, done = _answer(ws)
        ws.send(
            json.dumps({"model": "small", "messages": messages, "stream_options": {"include_usage": True}})
        )
        *with_usage, _ = _answer(ws)
        ws.send(json.dumps({"model": "small", "messages": messages, "mode": "tokens"}))  # per message
        *tokens, _ = _answer(ws)
    assert all(c["chunk"]["object"] == "chat.completion.chunk" for c in chunks)
    assert {c["chunk"]["model"] for c in chunks} == {"gpt-4o-mini"}  # the name asked for, as over SSE
    assert "".join(c["chunk"]["choices"][0]["delta"].get("content", "") for c in chunks) == TEXT
    assert not any("usage" in c["chunk"] for c in chunks)  # not asked for: not sent, as over SSE
    assert done["done"] is True and done["usage"] == USAGE
    assert with_usage[-1]["chunk"]["choices"] == [] and with_usage[-1]["chunk"]["usage"] == USAGE
    assert "".join(t["token"] for t in tokens) == TEXT


def test_two_requests_with_ids_share_a_connection(gateway: GatewayServer) -> None:
    with _connect(gateway) as ws:
        ws.send(json.dumps({"id": "a", "model": "small", "prompt": "one"}))
        ws.send(json.dumps({"id": 2, "model": "small", "prompt": "two"}))
        frames: dict[object, list[dict[str, Any]]] = {"a": [], 2: []}
        while not all(f and _is_last(f[-1]) for f in frames.values()):
            frame = _recv(ws)
            frames[frame["id"]].append(frame)  # every frame names its request
    for answer in frames.values():
        *tokens, done = answer
        assert "".join(t["token"] for t in tokens) == TEXT and done["usage"] == USAGE


def test_a_duplicate_open_id_is_refused_and_cancel_aborts_the_upstream(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    before_requests, before_abandoned = len(upstream.requests), upstream.num_hangs_abandoned
    with _connect(gateway) as ws:
        ws.send(json.dumps({"id": "h", "model": "hang", "prompt": "wait"}))
        _wait_for(lambda: len(upstream.requests) > before_requests)  # it is open upstream
        ws.send(json.dumps({"id": "h", "model": "small", "prompt": "again"}))
        refused = _recv(ws)
        assert refused["id"] == "h" and refused["error"]["code"] == "duplicate_id"
        ws.send(json.dumps({"type": "cancel", "id": "h"}))
        assert _recv(ws) == {"id": "h", "done": True, "cancelled": True}
        _wait_for(lambda: upstream.num_hangs_abandoned > before_abandoned)
        ws.send(json.dumps({"id": "h", "model": "small", "prompt": "now"}))  # the id is free again
        assert _answer(ws)[-1]["done"] is True
    gateway.settle()
    assert all(s.outstanding == 0 for s in gateway.gateway.balancer.all_replicas())


@pytest.mark.parametrize(
    "header", [f"Bearer {new_key()}", "Basic dXNlcjpwYXNz"], ids=["unknown-bearer", "basic"]
)
def test_a_bad_key_on_the_upgrade_closes_with_4401(gateway: GatewayServer, header: str) -> None:
    ws = connect(
        f"ws://127.0.0.1:{gateway.port}/v1/ws", additional_headers={"Authorization": header}, proxy=None
    )
    error = _recv(ws)
    assert error["status"] == 401 and error["error"]["code"] == "invalid_api_key"
    assert _closed_with(ws) == 4401


def test_a_first_message_without_a_key_closes_with_4401(gateway: GatewayServer) -> None:
    ws = _connect(gateway, key=None)
    ws.send(json.dumps({"model": "small", "prompt": "hi"}))
    assert _recv(ws)["error"]["code"] == "invalid_api_key"
    assert _closed_with(ws) == 4401


def test_the_key_may_come_in_the_first_message(gateway: GatewayServer) -> None:
    with _connect(gateway, key=None) as ws:
        ws.send(json.dumps({"type": "auth", "api_key": USER}))
        assert _recv(ws) == {"authenticated": True}
        ws.send(json.dumps({"model": "small", "prompt": "hi"}))
        assert _answer(ws)[-1]["usage"] == USAGE
        ws.send(json.dumps({"model": "small", "prompt": "hi", "api_key": USER}))  # first message only
        assert _recv(ws)["error"]["param"] == "api_key"
    with _connect(gateway, key=None) as ws:
        ws.send(json.dumps({"model": "small", "prompt": "hi", "api_key": USER}))  # a request carries it
        assert _answer(ws)[-1]["usage"] == USAGE


def test_a_rate_limited_request_gets_a_429_frame_and_the_connection_stays(gateway: GatewayServer) -> None:
    with _connect(gateway, LIMITED) as ws:
        ws.send(json.dumps({"id": 1, "model": "small", "prompt": "hi"}))
        assert _answer(ws)[-1]["done"] is True
        ws.send(json.dumps({"id": 2, "model": "small", "prompt": "hi"}))
        refused = _recv(ws)
        assert refused["id"] == 2 and refused["status"] == 429
        assert (
            refused["error"]["code"] == "rate_limit_exceeded"
            and refused["error"]["type"] == "rate_limit_error"
        )
        assert 1 <= refused["retry_after_s"] <= 61
        ws.send(json.dumps({"type": "auth"}))  # the connection still answers
        assert _recv(ws) == {"authenticated": True}


def test_bad_input_gets_error_frames_on_a_connection_that_stays(gateway: GatewayServer) -> None:
    with _connect(gateway) as ws:
        ws.send("{not json")
        error = _recv(ws)
        assert error["error"]["code"] == "invalid_json" and error["status"] == 400 and "id" not in error
        ws.send(json.dumps({"id": "t", "model": "small", "prompt": "hi", "temperature": 5}))
        error = _recv(ws)
        assert error["id"] == "t" and error["error"]["param"] == "temperature"
        assert error["error"]["code"] == "invalid_value" and error["error"]["type"] == "invalid_request_error"
        ws.send(json.dumps({"id": "m", "prompt": "hi"}))
        assert _recv(ws)["error"] == {
            "message": "Missing required parameter: 'model'.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "missing_required_parameter",
        }
        ws.send(json.dumps({"id": "n", "model": "nope", "prompt": "hi"}))
        assert _recv(ws)["error"]["code"] == "model_not_found"
        ws.send(json.dumps({"id": "ok", "model": "small", "prompt": "hi"}))
        assert _answer(ws)[-1]["done"] is True


@pytest.mark.parametrize("how", ["close frame", "socket dropped"])
def test_a_client_that_leaves_mid_stream_cancels_its_upstream(
    gateway: GatewayServer, upstream: FakeUpstream, how: str
) -> None:
    before = upstream.num_streams_cancelled
    ws = _connect(gateway)
    ws.send(json.dumps({"model": "slow", "prompt": "a long answer"}))
    assert "token" in _recv(ws)  # the stream is flowing
    if how == "close frame":
        ws.close()
    else:
        ws.close_socket()
    _wait_for(lambda: upstream.num_streams_cancelled > before)
    gateway.settle()  # its finishers ran: the replica released, the limits settled
    assert all(s.outstanding == 0 for s in gateway.gateway.balancer.all_replicas())


def test_too_many_failed_authentications_close_with_4429(
    tmp_path: Path, upstream: FakeUpstream, redis_flushed: str
) -> None:
    document = _policy(upstream, limits={"unauthenticated": {"failed_auths_per_minute": 1}})
    path = write_policy(tmp_path / "policy.yaml", document)
    server = GatewayServer(path, store=RedisStore(redis_flushed, timeout_s=0.5)).start()
    try:
        codes = []
        for _ in range(2):
            ws = _connect(server, key="sk-wrong")
            _recv(ws)
            codes.append(_closed_with(ws))
        assert codes == [4401, 4429]
    finally:
        server.stop()


def test_the_documented_client_works(gateway: GatewayServer) -> None:
    """docs/websocket.md's Python client, run as written against this gateway."""
    page = (ROOT / "docs" / "websocket.md").read_text(encoding="utf-8")
    block = re.search(r"^## A Python client\n\n```python\n(.*?)^```", page, re.M | re.S)
    assert block is not None
    namespace: dict[str, Any] = {"__name__": "websocket_md"}
    exec(compile(block.group(1), "docs/websocket.md", "exec"), namespace)
    url = f"ws://127.0.0.1:{gateway.port}/v1/ws"
    assert asyncio.run(namespace["ask"](url, USER, "Say hello.")) == TEXT
    assert asyncio.run(namespace["ask_many"](url, USER, ["one", "two", "three"])) == [TEXT] * 3
