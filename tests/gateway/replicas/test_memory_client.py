"""The in-memory upstream client: replies, streams, errors as the aiohttp client raises them, records."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp
import pytest

from gateway.errors import GatewayError, UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from gateway.replicas.balancer import Balancer
from gateway.replicas.client import UpstreamClient
from gateway.replicas.health import HealthChecker
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.replicas.pools import Timeouts
from tests.support.calls import compile_doc, policy_doc

TIMEOUTS = Timeouts(first_byte_s=5, total_s=10)


def _answer(document: object) -> MemoryUpstreamClient:
    return MemoryUpstreamClient(lambda url, body, headers: Reply.json(document))


async def test_a_json_reply_is_read_and_the_request_recorded() -> None:
    client = _answer({"ok": True})
    response = await client.post(
        "http://a.test/v1/chat/completions",
        b'{"model":"m"}',
        {"X-Request-Id": "r1"},
        TIMEOUTS,
        "up",
        headers_s=3,
    )
    assert (response.status, await response.read()) == (200, b'{"ok":true}')
    response.release()
    [request] = client.requests
    assert (request.method, request.url, request.json(), request.headers["X-Request-Id"]) == (
        "POST",
        "http://a.test/v1/chat/completions",
        {"model": "m"},
        "r1",
    )
    assert request.headers_s == 3 and request.timeouts is TIMEOUTS
    assert client.responses[0].is_released and not client.responses[0].is_closed


async def test_an_async_handler_sees_url_body_and_headers() -> None:
    seen: list[tuple[str, bytes, str]] = []

    async def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        seen.append((url, body, headers["traceparent"]))
        return Reply(status=503, body=b"busy", content_type="text/plain")

    client = MemoryUpstreamClient(handler)
    response = await client.post("http://a.test/x", b"{}", {"traceparent": "00-t"}, TIMEOUTS, "up")
    assert (response.status, response.content_type, await response.read()) == (503, "text/plain", b"busy")
    assert seen == [("http://a.test/x", b"{}", "00-t")]


async def test_a_stream_yields_its_events_then_done() -> None:
    client = MemoryUpstreamClient(
        lambda url, body, headers: Reply.sse({"n": 1}, b": keep-alive\n\n", {"n": 2})
    )
    response = await client.post("http://a.test/x", b"{}", {}, TIMEOUTS, "up")
    assert response.content_type == "text/event-stream"
    parts = [part async for part in response.chunks(7.0, first_s=2.0)]
    assert parts == [b'data: {"n":1}\n\n', b": keep-alive\n\n", b'data: {"n":2}\n\n', b"data: [DONE]\n\n"]
    assert (client.responses[0].idle_s, client.responses[0].first_s) == (7.0, 2.0)


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (UpstreamTimeout("stalled"), UpstreamTimeout),  # the gateway's own errors pass unchanged
        (TimeoutError(), UpstreamTimeout),  # foreign ones are mapped as the aiohttp client maps them
        (aiohttp.ServerDisconnectedError(), UpstreamProtocolError),
    ],
)
async def test_a_stream_fails_where_its_error_part_is(
    part: BaseException, expected: type[GatewayError]
) -> None:
    client = MemoryUpstreamClient(lambda url, body, headers: Reply.sse({"n": 1}, part, done=False))
    response = await client.post("http://a.test/x", b"{}", {}, TIMEOUTS, "upstream r1")
    received: list[bytes] = []
    with pytest.raises(expected, match=r"stalled|upstream r1"):
        async for chunk in response.chunks(1.0):
            received.append(chunk)
    assert received == [b'data: {"n":1}\n\n']
    with pytest.raises(expected):
        await response.read()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (UpstreamConnectError("refused"), UpstreamConnectError),
        (aiohttp.ConnectionTimeoutError(), UpstreamConnectError),  # a connect timeout is a connect error
        (TimeoutError(), UpstreamTimeout),
    ],
)
async def test_a_handler_raises_what_the_aiohttp_client_would(
    error: Exception, expected: type[GatewayError]
) -> None:
    def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        raise error

    client = MemoryUpstreamClient(handler)
    with pytest.raises(expected):
        await client.post("http://a.test/x", b"{}", {}, TIMEOUTS, "upstream r1")
    assert len(client.requests) == 1 and client.responses == []


async def test_a_handler_that_never_answers_meets_the_headers_timeout() -> None:
    never = asyncio.Event()

    async def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        await never.wait()
        return Reply()

    client = MemoryUpstreamClient(handler)
    with pytest.raises(UpstreamTimeout):
        await client.post("http://a.test/x", b"{}", {}, TIMEOUTS, "up", headers_s=0.0)


async def test_it_serves_the_health_checker() -> None:
    statuses = {"http://small-0.test/health": 200, "http://small-1.test/health": 503}

    def handler(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        return Reply(status=statuses[url], body=b"{}")

    balancer = Balancer()
    balancer.update(compile_doc(policy_doc("small", num_replicas=2)).policy)
    client: UpstreamClient = MemoryUpstreamClient(handler)  # the protocol the gateway injects
    checker = HealthChecker(balancer, client)
    up, down = balancer.replicas("small")
    assert await checker.probe(up) and not await checker.probe(down)
    assert await client.get("http://small-0.test/health", 1.0) == (200, b"{}")
    await client.close()
    assert isinstance(client, MemoryUpstreamClient) and client.is_closed
    assert [r.method for r in client.requests] == ["GET", "GET", "GET"]
