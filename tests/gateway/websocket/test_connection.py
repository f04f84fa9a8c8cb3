"""gateway/websocket/connection.py in-process: the app driven over a scripted ASGI socket, the upstream
in memory. What needs the socket's own behaviour (a full write buffer, a deadline, a reload between
two requests) is easier to hold still here than over loopback (tests/integration/test_websocket.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import pytest

from gateway.app import create_app
from gateway.compiled import compile_policy
from gateway.errors import AuthenticationFailed, RateLimited, RequestTimeout, ServiceUnavailable
from gateway.policy import parse_policy
from gateway.proxy import ProxyApp
from gateway.reloader import PolicyReloader
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.replicas.pools import Timeouts
from gateway.settings import Settings
from gateway.stores import MemoryStore
from gateway.websocket import WebSocketEndpoint
from gateway.websocket.connection import close_code
from tests.support.calls import api_key, policy_doc

Message = MutableMapping[str, Any]
_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"t"}}]}\n\n'


class FakeSocket:
    """The server side of one WebSocket, scripted: the client's messages go in with ``client_sends``,
    the app's come out of ``sent``. Clearing ``writable`` plays a client that stopped reading: the
    app's next send waits (as uvicorn's does while the transport's buffer is full)."""

    def __init__(self, headers: dict[str, str] | None = None, query: bytes = b"") -> None:
        self.scope: Message = {
            "type": "websocket",
            "path": "/v1/ws",
            "query_string": query,
            "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": ("127.0.0.1", 50000),
        }
        self.incoming: asyncio.Queue[Message] = asyncio.Queue()
        self.sent: asyncio.Queue[Message] = asyncio.Queue()
        self.writable = asyncio.Event()
        self.writable.set()
        self.is_send_waiting = asyncio.Event()
        self.incoming.put_nowait({"type": "websocket.connect"})

    async def receive(self) -> Message:
        return await self.incoming.get()

    async def send(self, message: Message) -> None:
        if not self.writable.is_set():
            self.is_send_waiting.set()
            await self.writable.wait()
        await asyncio.sleep(0)  # a write is a point where other tasks run, as on a real socket
        self.sent.put_nowait(message)

    def client_sends(self, document: dict[str, Any]) -> None:
        self.incoming.put_nowait({"type": "websocket.receive", "text": json.dumps(document)})

    def client_leaves(self) -> None:
        self.incoming.put_nowait({"type": "websocket.disconnect", "code": 1006})

    async def next(self) -> Message:
        async with asyncio.timeout(10):  # a bound on a broken test, not a wait for anything
            return await self.sent.get()

    async def next_frame(self) -> dict[str, Any]:
        message = await self.next()
        assert message["type"] == "websocket.send", message
        frame = json.loads(message["text"])
        assert isinstance(frame, dict)
        return frame

    async def closed_with(self) -> int:
        message = await self.next()
        assert message["type"] == "websocket.close", message
        code = message["code"]
        assert isinstance(code, int)
        return code


class EndlessResponse:
    """A stream that never ends; counts the events the gateway has read from it."""

    status = 200
    content_type = "text/event-stream"

    def __init__(self) -> None:
        self.num_read = 0
        self.is_closed = False

    async def read(self) -> bytes:
        return b""

    async def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0)  # a network read
            self.num_read += 1
            yield _EVENT

    def close(self) -> None:
        self.is_closed = True

    def release(self) -> None:
        pass


class EndlessUpstream:
    """An upstream client whose every answer is an ``EndlessResponse``."""

    def __init__(self) -> None:
        self.responses: list[EndlessResponse] = []

    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        timeouts: Timeouts,
        what: str,
        *,
        headers_s: float | None = None,
    ) -> EndlessResponse:
        self.responses.append(EndlessResponse())
        return self.responses[-1]

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        return 200, b""

    async def close(self) -> None:
        pass


def _app(client: Any, document: dict[str, Any] | None = None, **settings: Any) -> ProxyApp:
    reloader = PolicyReloader("unused.yaml", policy=parse_policy(document or policy_doc(), "test"))
    return create_app(Settings(**settings), client=client, reloader=reloader, store=MemoryStore())


async def test_a_client_that_stops_reading_stops_its_upstream() -> None:
    upstream = EndlessUpstream()
    app = _app(upstream)
    socket = FakeSocket()
    served = asyncio.create_task(app(socket.scope, socket.receive, socket.send))
    assert (await socket.next())["type"] == "websocket.accept"
    socket.client_sends({"id": 1, "model": "small", "prompt": "go on forever"})
    for _ in range(3):
        assert await socket.next_frame() == {"id": 1, "token": "t"}
    socket.writable.clear()  # the client reads no more: the socket's buffer is full
    await socket.is_send_waiting.wait()
    [response] = upstream.responses
    num_read = response.num_read
    for _ in range(100):  # every chance for a reader that buffers to run ahead
        await asyncio.sleep(0)
    assert response.num_read == num_read  # nothing read ahead of the blocked frame
    socket.writable.set()
    await socket.next_frame()
    socket.client_leaves()
    await served
    assert response.is_closed  # the client left: the upstream connection was dropped
    await app.gateway.settle()
    assert app.gateway.inflight.num_open == 0


async def test_no_key_within_the_deadline_closes_with_4408() -> None:
    app = _app(
        MemoryUpstreamClient(lambda *_: Reply.json({})),
        policy_doc(auth={"required": True}),
        body_read_timeout_s=0.05,
    )
    socket = FakeSocket()
    await app(socket.scope, socket.receive, socket.send)
    assert (await socket.next())["type"] == "websocket.accept"
    assert (await socket.next_frame())["error"]["code"] == "request_timeout"
    assert await socket.closed_with() == 4408


async def test_a_request_over_the_open_limit_gets_a_429_frame() -> None:
    release = asyncio.Event()

    async def hang(url: str, body: bytes, headers: object) -> Reply:
        await release.wait()
        return Reply.sse()

    upstream = MemoryUpstreamClient(hang)
    app = _app(upstream)
    endpoint = WebSocketEndpoint(app.gateway, max_requests_per_connection=1)
    socket = FakeSocket()
    served = asyncio.create_task(endpoint(socket.scope, socket.receive, socket.send))
    await socket.next()
    socket.client_sends({"id": "a", "model": "small", "prompt": "wait"})
    socket.client_sends({"id": "b", "model": "small", "prompt": "too many"})
    refused = await socket.next_frame()
    assert refused["id"] == "b" and refused["status"] == 429
    assert refused["error"]["code"] == "too_many_open_requests"
    socket.client_leaves()  # the open one is cancelled
    await served
    await app.gateway.settle()
    assert len(upstream.requests) == 1 and not release.is_set()


async def test_a_key_dropped_by_a_reload_ends_the_connection_with_4401() -> None:
    key, stanza = api_key("acme")
    document = policy_doc(auth={"required": True}, keys=[stanza])
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
    app = _app(MemoryUpstreamClient(lambda *_: Reply.sse(chunk)), document)
    socket = FakeSocket({"Authorization": f"Bearer {key}"})
    served = asyncio.create_task(app(socket.scope, socket.receive, socket.send))
    await socket.next()
    socket.client_sends({"model": "small", "prompt": "hi"})
    assert await socket.next_frame() == {"token": "hi"}
    assert (await socket.next_frame())["done"] is True
    document["keys"] = []
    app.gateway.reloader.adopt(compile_policy(parse_policy(document, "test"), environ={}))
    socket.client_sends({"id": 2, "model": "small", "prompt": "hi"})
    refused = await socket.next_frame()
    assert refused["id"] == 2 and refused["error"]["code"] == "invalid_api_key"
    assert await socket.closed_with() == 4401
    await served


async def test_other_websocket_paths_are_not_served() -> None:
    app = _app(MemoryUpstreamClient(lambda *_: Reply.json({})))
    socket = FakeSocket()
    socket.scope["path"] = "/v1/chat/completions"
    await app(socket.scope, socket.receive, socket.send)
    assert (await socket.next())["type"] == "websocket.close"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (AuthenticationFailed("no"), 4401),
        (RateLimited("too many failures"), 4429),
        (RequestTimeout("late"), 4408),
        (ServiceUnavailable("store down"), 1013),
    ],
)
def test_close_codes(error: Exception, code: int) -> None:
    assert close_code(error) == code  # type: ignore[arg-type]
