"""The HTTP/1.1 upstream client against real loopback servers: keep-alive reuse, idle expiry, stale
connections, the connection bound, connect failures, ``get``, ``close`` and https (one exchange's
framing, streaming and timeouts: test_http1_connection.py).

Every test runs on asyncio's loop and again on uvloop, the gateway's (``test_on_uvloop``); none takes
fixtures, so that it can."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamProtocolError, UpstreamTimeout
from tests.gateway.replicas.http1_support import (
    SHORT,
    TIMEOUTS,
    RawServer,
    Reader,
    Writer,
    answering,
    numbered,
    ok,
    opened,
    post,
    stall,
    until,
)


async def test_sequential_requests_share_one_keep_alive_connection() -> None:
    peers = []

    async def chat(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return web.json_response({"n": len(await request.read())})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with opened() as client:
            for size in (1, 10, 100):
                assert await post(client, f"http://127.0.0.1:{port}/v1/chat/completions", b"x" * size) == (
                    200,
                    b'{"n": %d}' % size,
                )
            assert (client.num_open, client.num_idle) == (1, 1)
    finally:
        await runner.cleanup()
    assert len(peers) == 3 and len(set(peers)) == 1


async def test_idle_connections_are_reused_most_recent_first() -> None:
    async with RawServer(numbered) as server, opened() as client:
        first = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        second = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        assert (await first.read(), await second.read()) == (b"1", b"2")
        first.release()
        second.release()
        assert (client.num_open, client.num_idle) == (2, 2)
        assert await post(client, server.url()) == (200, b"2")
        assert await post(client, server.url()) == (200, b"2")


async def test_idle_connections_expire_after_keepalive_s() -> None:
    async with RawServer(numbered) as server, opened(keepalive_s=0.2) as client:
        assert await post(client, server.url()) == (200, b"1")
        assert client.num_idle == 1
        await until(lambda: client.num_open == 0)
        await until(lambda: server.num_closed == 1)
        assert await post(client, server.url()) == (200, b"2")


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def answer_once(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(ok(b"%d" % server.num_connections))  # keep-alive (HTTP/1.1), then gone

    async with RawServer(answer_once) as server, opened() as client:
        assert await post(client, server.url()) == (200, b"1")
        await until(lambda: client.num_open == 0)  # it left the pool when the server closed it
        assert await post(client, server.url()) == (200, b"2")


async def test_a_connection_close_answer_is_not_pooled() -> None:
    async with RawServer(answering(ok(b"{}", b"Connection: close"))) as server, opened() as client:
        assert await post(client, server.url()) == (200, b"{}")
        await until(lambda: client.num_open == 0)
        assert await post(client, server.url()) == (200, b"{}")
    assert server.num_connections == 2


async def test_a_dead_pooled_connection_is_a_protocol_error_not_a_silent_retry() -> None:
    async def once(server: RawServer, reader: Reader, writer: Writer) -> None:
        await server.read_request(reader)
        writer.write(ok(b"{}"))
        await server.read_request(reader)  # the second request: the connection ends unanswered

    async with RawServer(once) as server, opened() as client:
        assert await post(client, server.url()) == (200, b"{}")
        with pytest.raises(UpstreamProtocolError, match="server disconnected"):
            await post(client, server.url())
    assert server.num_connections == 1


async def test_past_max_connections_a_request_waits_for_a_freed_connection() -> None:
    async with RawServer(numbered) as server, opened(max_connections=1) as client:
        held = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        waiting = asyncio.create_task(post(client, server.url()))
        await until(lambda: client.num_waiting == 1)
        assert not waiting.done()
        assert await held.read() == b"1"
        held.release()
        assert await waiting == (200, b"1")  # handed the freed connection
        assert (server.num_connections, client.num_open, client.num_waiting) == (1, 1, 0)


async def test_max_connections_bounds_all_origins_together() -> None:
    async with RawServer(numbered) as one, RawServer(numbered) as two, opened(max_connections=1) as client:
        held = await client.post(one.url(), b"{}", {}, TIMEOUTS, "up")
        waiting = asyncio.create_task(post(client, two.url()))
        await until(lambda: client.num_waiting == 1)
        assert await held.read() == b"1"
        held.release()  # the next in line wants another origin: this connection closes for it
        assert await waiting == (200, b"1")
        await until(lambda: one.num_closed == 1)
        # an idle connection of another origin makes room at once
        assert await post(client, one.url()) == (200, b"2")
        await until(lambda: two.num_closed == 1)
        assert client.num_open == 1


async def test_waiting_for_a_connection_is_bounded_by_headers_s() -> None:
    async with RawServer(numbered) as server, opened(max_connections=1) as client:
        held = await client.post(server.url(), b"{}", {}, TIMEOUTS, "up")
        with pytest.raises(UpstreamTimeout):
            await client.post(server.url(), b"{}", {}, TIMEOUTS, "up", headers_s=0.2)
        assert client.num_waiting == 0
        assert await held.read() == b"1"
        held.release()
        assert await post(client, server.url()) == (200, b"1")
        assert client.num_open == 1


async def test_close_closes_every_connection() -> None:
    async with RawServer(numbered) as server, opened() as client:
        responses = [await client.post(server.url(), b"{}", {}, TIMEOUTS, "up") for _ in range(3)]
        for response in responses[:2]:
            await response.read()
            response.release()
        await client.close()
        assert (client.num_open, client.num_idle) == (0, 0)
        await until(lambda: server.num_closed == 3)
        assert await post(client, server.url()) == (200, b"4")  # usable again


async def test_a_refused_connect_is_a_connect_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with opened() as client:
        with pytest.raises(UpstreamConnectError, match=r"up: cannot connect \(.*refused"):
            await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {}, TIMEOUTS, "up")
        with pytest.raises(UpstreamConnectError):
            await client.get(f"http://127.0.0.1:{port}/health", 1.0)
        assert client.num_open == 0


async def test_a_connect_that_hangs_times_out_as_a_connect_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # never accepted: once its queue is full, further SYNs go unanswered
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(8):
            filler = socket.socket()
            fillers.append(filler)
            filler.settimeout(0.5)
            try:
                filler.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            pytest.skip("the listen queue never filled")
        try:
            async with opened() as client:
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                with pytest.raises(UpstreamConnectError, match=r"cannot connect \(timed out\)"):
                    await client.post(url, b"{}", {}, SHORT, "up")
                # the headers bound, shorter, wins: a timeout then, not a connect error
                with pytest.raises(UpstreamTimeout):
                    await client.post(url, b"{}", {}, TIMEOUTS, "up", headers_s=0.2)
                assert client.num_open == 0
        finally:
            for filler in fillers:
                filler.close()


async def test_get_reads_a_health_page() -> None:
    async with RawServer(answering(ok(b"up", content_type=b"text/plain"))) as server, opened() as client:
        assert await client.get(server.url("/health"), 1.0) == (200, b"up")
        assert await client.get(server.url("/health"), 1.0) == (200, b"up")
    assert server.heads[0] == (
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept-Encoding: identity\r\n\r\n" % server.port
    )
    assert server.num_connections == 1
    async with RawServer(stall) as server, opened() as client:
        with pytest.raises(UpstreamTimeout):
            await client.get(server.url("/health"), 0.2)


async def test_a_header_with_a_line_break_is_refused_before_connecting() -> None:
    async with RawServer(answering(ok(b"{}"))) as server, opened() as client:
        with pytest.raises(UpstreamError, match="line break"):
            await client.post(server.url(), b"{}", {"X-Evil": "a\r\nHost: b"}, TIMEOUTS, "up")
    assert server.num_connections == 0


def _certificate(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: the server's context, and a client's that trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return server, ssl.create_default_context(cafile=str(cert_file))


async def test_https_verifies_the_server_and_keeps_the_connection() -> None:
    with tempfile.TemporaryDirectory() as directory:
        server_context, client_context = _certificate(Path(directory))
    async with RawServer(numbered, ssl=server_context) as server:
        async with opened(ssl_context=client_context) as client:
            assert server.url().startswith("https://")
            assert await post(client, server.url()) == (200, b"1")
            assert await post(client, server.url()) == (200, b"1")
            assert await client.get(server.url("/health"), 5.0) == (200, b"1")
        async with opened() as client:  # the default context does not trust it
            with pytest.raises(UpstreamConnectError, match="certificate verify failed"):
                await post(client, server.url())


TESTS = [value for name, value in sorted(globals().items()) if name.startswith("test_")]


@pytest.mark.parametrize("test", TESTS, ids=lambda test: test.__name__.removeprefix("test_"))
def test_on_uvloop(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    uvloop.run(test())
