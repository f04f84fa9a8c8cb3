"""TLS: the gateway serves HTTPS from a certificate it reloads when the files change (a rotation seen by
the next handshake, a half-written pair never served), asks for client certificates when given a CA, and
reaches ``https`` upstreams with a CA bundle (and a client certificate) of its own. The serving tests run
``python -m gateway serve`` as a process and talk to it with the openai SDK and ``ssl``."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import openai
import pytest
from cryptography import x509

from gateway.errors import UpstreamError
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.settings import Settings
from gateway.tls import CertificateReloader, reloading_context, upstream_context, uvicorn_tls_options
from tests.support.certs import CertificateAuthority, Issued
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import fake_policy, write_policy
from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]


def served_serial(port: int, ca: Path, client: Issued | None = None) -> int:
    """The serial number of the certificate a fresh handshake with 127.0.0.1:``port`` gets."""
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def until(condition: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- the reloader, in process


async def test_a_rotated_pair_is_served_to_the_next_handshake_and_a_half_written_one_never(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority(tmp_path)
    first = ca.issue("server")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(first.cert, first.key)
    reloader = CertificateReloader(context, str(first.cert), str(first.key))
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]

    def handshake() -> int:
        return served_serial(port, ca.path)

    async with server:
        assert await asyncio.to_thread(handshake) == first.serial
        assert not reloader.check()  # nothing changed
        other = CertificateAuthority(tmp_path / "..", "another CA").issue("stray")
        first.key.write_bytes(other.key.read_bytes())  # mid-rotation: a key that is not the cert's
        assert not reloader.check() and reloader.num_reloads == 0
        assert await asyncio.to_thread(handshake) == first.serial  # the old pair keeps serving
        second = ca.issue("server")  # the whole new pair, renamed over the old files
        assert reloader.check() and reloader.num_reloads == 1
        assert await asyncio.to_thread(handshake) == second.serial


async def test_the_uvicorn_factory_reloads_from_the_serving_loop(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("server")

    class Config:
        ssl_certfile, ssl_keyfile, ssl_keyfile_password = str(issued.cert), str(issued.key), None

    def default() -> ssl.SSLContext:
        made = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        made.load_cert_chain(issued.cert, issued.key)
        return made

    context = reloading_context(Config(), default, reload_s=0.01)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        rotated = ca.issue("server")
        for _ in range(500):  # the loop's timer picks the change up: poll the handshake, not the clock
            if await asyncio.to_thread(served_serial, port, ca.path) == rotated.serial:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the rotated certificate was never served")


def test_settings_refuse_half_a_pair_and_map_to_uvicorn(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="both a certificate and its key"):
        Settings(tls_certfile="cert.pem")
    with pytest.raises(ValueError, match="needs TLS"):
        Settings(tls_client_ca="ca.pem")
    with pytest.raises(ValueError, match="SORTYARD_TLS_CLIENT_AUTH"):
        Settings(tls_certfile="c", tls_keyfile="k", tls_client_auth="sometimes")
    assert uvicorn_tls_options(Settings()) == {}
    options = uvicorn_tls_options(Settings(tls_certfile="c", tls_keyfile="k", tls_client_ca="ca"))
    assert options["ssl_cert_reqs"] == ssl.CERT_REQUIRED and options["ssl_ca_certs"] == "ca"
    assert upstream_context(Settings()) is None


# -- the gateway as a process


@contextmanager
def gateway(tmp_path: Path, upstream_url: str, *args: str) -> Iterator[int]:
    port = free_port()
    policy = write_policy(tmp_path / f"policy-{port}.yaml", fake_policy(upstream_url))
    command = [sys.executable, "-m", "gateway", "serve", "--policy", str(policy), "--port", str(port), *args]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SORTYARD_")}
    environ["SORTYARD_TLS_RELOAD_S"] = "0.05"
    proc = subprocess.Popen(command, cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        until(lambda: proc.poll() is not None or _listening(port), "the gateway to listen")
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        yield port
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def sdk(port: int, ca: Path, client: Issued | None = None) -> openai.OpenAI:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    return openai.OpenAI(
        base_url=f"https://127.0.0.1:{port}/v1",
        api_key="sk-anything",
        max_retries=0,
        http_client=httpx2.Client(verify=context),
    )


def ask(client: openai.OpenAI) -> str | None:
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content


async def reach_https_upstream(port: int, ca: Path) -> None:
    url = f"https://127.0.0.1:{port}/healthz"
    trusting = Http1UpstreamClient(ssl_context=upstream_context(Settings(upstream_ca_bundle=str(ca))))
    system = Http1UpstreamClient()  # the system's trust store: it has never heard of this CA
    try:
        assert (await trusting.get(url, 5.0))[0] == 200
        with pytest.raises(UpstreamError):
            await system.get(url, 5.0)
    finally:
        await trusting.close()
        await system.close()


@pytest.mark.slow
def test_https_with_rotation_client_certificates_and_tls_upstreams(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    served = ca.issue("server")
    client_cert = ca.issue("client", client=True)
    upstream = FakeUpstream().start()
    try:
        tls = ("--tls-cert", str(served.cert), "--tls-key", str(served.key))
        with gateway(tmp_path, upstream.base_url, *tls) as port:
            assert ask(sdk(port, ca.path))  # the openai SDK over HTTPS
            rotated = ca.issue("server")  # Kubernetes swaps the Secret's files
            until(lambda: served_serial(port, ca.path) == rotated.serial, "the rotated certificate")
            assert ask(sdk(port, ca.path))

            # the upstream client reaches it as an https upstream with the CA bundle, not without
            asyncio.run(reach_https_upstream(port, ca.path))

        with gateway(tmp_path, upstream.base_url, *tls, "--tls-client-ca", str(ca.path)) as port:
            assert ask(sdk(port, ca.path, client_cert))  # mutual TLS
            with pytest.raises(openai.APIConnectionError):  # no client certificate: no handshake
                ask(sdk(port, ca.path))
    finally:
        upstream.stop()
