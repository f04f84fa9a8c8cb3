"""One exchange of the HTTP/1.1 upstream client against real loopback servers: the request, body
framing, streaming, timeouts, failures mid-response and backpressure (the client and its pool:
test_http1.py).

Every test runs on asyncio's loop and again on uvloop, the gateway's (``test_on_uvloop``); none takes
fixtures, so that it can."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from gateway.errors import UpstreamProtocolError, UpstreamTimeout
from gateway.replicas.http1_connection import HIGH_WATER
from gateway.replicas.pools import Timeouts
from tests.gateway.replicas.http1_support import (
    SHORT,
    TIMEOUTS,
    Handler,
    RawServer,
    Reader,
    Writer,
    answering,
    chunked,
    ok,
    opened,
    post,
    stall,
    until,
)

MiB = 1024 * 1024
MAX_READ = 256 * 1024
"""The most one socket read brings (asyncio's and uvloop's buffer)."""


async def test_the_request_is_the_head_then_the_body_untouched() -> None:
    async with RawServer(answering(ok(b'{"ok":1}'))) as server, opened() as client:
        headers = {"Content-Type": "application/json", "X-Request-Id": "r1"}
        response = await client.post(
            server.url("/v1/chat/completions?x=1"), b'{"a":1}', headers, TIMEOUTS, "up"
        )
        assert (response.status, response.content_type) == (200, "application/json")
        assert response.headers["content-length"] == "8"
        assert await response.read() == b'{"ok":1}'
        response.release()
    assert server.heads == [
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept-Encoding: identity\r\n"
        b"Content-Type: application/json\r\nX-Request-Id: r1\r\nContent-Length: 7\r\n\r\n" % server.port
    ]
    assert server.bodies == [b'{"a":1}']


async def test_a_chunked_body_is_decoded_and_the_connection_kept() -> None:
    async def handler(server: RawServer, reader: Reader, writer: Writer) -> None:
        while True:
            await server.read_request(reader)
            raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"hello ", b"world")
            for i in range(0, len(raw), 7):  # in pieces cut anywhere
                writer.write(raw[i : i + 7])
                await writer.drain()

    async with RawServer(handler) as server, opened() as client:
        assert await post(client, server.url()) == (200, b"hello world")
        assert await post(client, server.url()) == (200, b"hello world")
    assert server.num_connections == 1


async def test_an_encoded_body_passes_through_undecoded() -> None:
    packed = gzip.compress(b'{"choices": []}')
    async with RawServer(answering(ok(packed, b"Content-Encoding: gzip"))) as server, opened() as client:
        assert await post(client, server.url()) == (200, packed)


async def test_a_body_without_framing_ends_with_the_connection() -> None:
    async def handler(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ")
        await writer.drain()
        writer.write(b"part two")

    async with RawServer(handler) as server, opened() as client:
        assert await post(client, server.url()) == (200, b"part one, part two")
        await until(lambda: client.num_open == 0)  # not pooled: its end was the body's


async def test_informational_responses_are_skipped_and_204_has_no_body() -> None:
    response = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
    async with RawServer(answering(response)) as server, opened() as client:
        assert await post(client, server.url()) == (204, b"")
        assert await post(client, server.url()) == (204, b"")
    assert server.num_connections == 1


async def test_chunks_come_as_they_arrive() -> None:
    go = asyncio.Event()

    async def handler(server: RawServer, reader: Reader, writer: Writer) -> None:
        while True:
            await server.read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            writer.write(b"5\r\none\n\n\r\n")
            await go.wait()  # the second only once the client has the first
            writer.write(b"5\r\ntwo\n\n\r\n0\r\n\r\n")
            await writer.drain()

    async with RawServer(handler) as server, opened() as client:
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        assert response.content_type == "text/event-stream"
        chunks = response.chunks(5.0)
        assert await anext(chunks) == b"one\n\n"
        go.set()
        assert [chunk async for chunk in chunks] == [b"two\n\n"]
        response.release()
        assert client.num_idle == 1


def _answer_then_stall(response: bytes) -> Handler:
    async def handler(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(response)
        await reader.read()

    return handler


async def test_the_headers_wait_times_out_and_drops_the_connection() -> None:
    async with RawServer(stall) as server, opened() as client:
        with pytest.raises(UpstreamTimeout, match="up: timed out"):
            await client.post(server.url(), b"{}", {}, TIMEOUTS, "up", headers_s=0.2)
        with pytest.raises(UpstreamTimeout):  # headers_s defaults to first_byte_s
            await client.post(server.url(), b"{}", {}, SHORT, "up")
        await until(lambda: server.num_closed == 2)
        assert client.num_open == 0


async def test_total_s_bounds_reading_the_body() -> None:
    partial = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"
    async with RawServer(_answer_then_stall(partial)) as server, opened() as client:
        timeouts = Timeouts(connect_s=5, first_byte_s=5, idle_s=5, total_s=0.3)
        response = await client.post(server.url(), b"{}", {}, timeouts, "up")
        with pytest.raises(UpstreamTimeout):
            await response.read()
        response.close()


async def test_a_stream_times_out_on_a_late_first_chunk_and_on_an_idle_gap() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with RawServer(_answer_then_stall(head)) as server, opened() as client:
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        with pytest.raises(UpstreamTimeout):
            async for _ in response.chunks(5.0, first_s=0.2):
                pass
        response.close()
    async with RawServer(_answer_then_stall(head + b"3\r\none\r\n")) as server, opened() as client:
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        received = []
        with pytest.raises(UpstreamTimeout):
            async for chunk in response.chunks(0.2, first_s=5.0):
                received.append(chunk)
        assert received == [b"one"]
        response.close()


async def test_a_body_cut_short_is_a_protocol_error() -> None:
    async def cut(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")

    async with RawServer(cut) as server, opened() as client:
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        with pytest.raises(UpstreamProtocolError, match="up: broken response"):
            await response.read()
        response.close()
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        received = []
        with pytest.raises(UpstreamProtocolError):
            async for chunk in response.chunks(5.0):
                received.append(chunk)
        assert b"".join(received) == b"0123456789"  # what came is passed on before the failure
        response.close()


async def test_a_malformed_response_is_a_protocol_error() -> None:
    for garbage in (
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    ):
        async with RawServer(_answer_then_stall(garbage)) as server, opened() as client:
            with pytest.raises(UpstreamProtocolError, match="broken response"):
                await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
            await until(lambda: client.num_open == 0)


async def test_an_unfinished_response_released_closes_when_its_tail_never_comes() -> None:
    async def partial(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        await reader.read()

    async with RawServer(partial) as server, opened() as client:
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        response.release()  # drains for DRAIN_S, then gives up
        await until(lambda: server.num_closed == 1)
        assert (client.num_open, client.num_idle) == (0, 0)


async def test_a_stream_released_before_its_last_chunk_is_drained_and_reused() -> None:
    tail = asyncio.Event()

    async def handler(server: RawServer, reader: Reader, writer: Writer) -> None:
        while True:
            await server.read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            writer.write(b"e\r\ndata: [DONE]\n\n\r\n")
            await tail.wait()  # the terminating chunk only after the client released the response
            tail.clear()
            writer.write(b"6\r\nextra\n\r\n0\r\n\r\n")  # and a late event, dropped
            await writer.drain()

    async with RawServer(handler) as server, opened() as client:
        for _ in range(2):
            response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
            assert await anext(response.chunks(5.0)) == b"data: [DONE]\n\n"
            response.release()
            assert client.num_idle == 0  # not yet: draining
            tail.set()
            await until(lambda: client.num_idle == 1)
    assert server.num_connections == 1  # the second stream reused the first one's connection


async def test_a_request_cancelled_while_waiting_drops_its_connection() -> None:
    async with RawServer(stall) as server, opened() as client:
        task = asyncio.create_task(client.post(server.url(), b"{}", {}, TIMEOUTS, "up"))
        await until(lambda: len(server.heads) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: server.num_closed == 1)
        assert client.num_open == 0


async def test_a_slow_reader_slows_the_upstream() -> None:
    """10 MiB read a little at a time: the client buffers at most HIGH_WATER and one read, and the rest
    waits in the upstream, not in the gateway."""
    body = bytes(range(256)) * 4096 * 10
    writers: list[asyncio.StreamWriter] = []

    async def large(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(ok(b"{}"))
        await server.read_request(reader)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        writers.append(writer)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        await reader.read()

    async with RawServer(large) as server, opened() as client:
        assert await post(client, server.url()) == (200, b"{}")
        (connection,) = client._connections  # small kernel buffers: most of the body must wait upstream
        assert connection.transport is not None
        connection.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024
        )
        response = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        chunks = response.chunks(5.0)
        received = [await anext(chunks)]
        await until(lambda: connection.is_paused)
        assert connection.buffered <= HIGH_WATER + MAX_READ
        (writer,) = writers
        assert len(body) - writer.transport.get_write_buffer_size() < 5 * MiB  # the rest waits upstream
        most = connection.buffered
        while True:
            most = max(most, connection.buffered)
            try:
                received.append(await anext(chunks))
            except StopAsyncIteration:
                break
            await asyncio.sleep(0)  # slow: the loop runs between reads
        assert most <= HIGH_WATER + MAX_READ
        assert b"".join(received) == body
        response.release()
        assert client.num_idle == 1


TESTS = [value for name, value in sorted(globals().items()) if name.startswith("test_")]


@pytest.mark.parametrize("test", TESTS, ids=lambda test: test.__name__.removeprefix("test_"))
def test_on_uvloop(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    uvloop.run(test())
