"""TLS and ACL Redis servers for tests: certificates made with the ``openssl`` CLI, redis-server
started with ``--tls-port`` on a free loopback port (the plaintext port off).

``make_certs(dir)`` writes a CA, a server certificate for 127.0.0.1 and localhost, a client
certificate (both signed by that CA), and a second, unrelated CA (for the "wrong CA" case).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.servers.redis_server import free_port


@dataclass(frozen=True)
class Certs:
    """PEM files of one test PKI."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing here."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=cwd)  # fmt: skip


def _signed(name: str, subject: str, extensions: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=cwd)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=cwd)  # fmt: skip


def make_certs(directory: Path, *, server_names: Sequence[str] = ("IP:127.0.0.1", "DNS:localhost")) -> Certs:
    """A CA, a server certificate for ``server_names`` (subjectAltName entries), a client certificate
    and an unrelated CA, as PEM files in ``directory``."""
    _ca("ca", directory)
    _ca("other-ca", directory)
    _signed("server", "/CN=redis-test", f"subjectAltName={','.join(server_names)}\n", directory)
    _signed("client", "/CN=gateway", "extendedKeyUsage=clientAuth\n", directory)
    return Certs(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.crt",
    )


class TlsRedis:
    """A redis-server that speaks only TLS on a loopback port, optionally asking for client certs
    (mutual TLS) and with ACL users (``users``: name -> password, each allowed everything)."""

    def __init__(
        self,
        certs: Certs,
        *,
        binary: str = "redis-server",
        require_client_cert: bool = False,
        users: dict[str, str] | None = None,
        default_password: str | None = None,
    ) -> None:
        self.certs = certs
        self.binary = binary
        self.require_client_cert = require_client_cert
        self.users = users or {}
        self.default_password = default_password
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sy-redis-tls-")
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, *, scheme: str = "rediss", userinfo: str = "", query: str = "") -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"{scheme}://{at}127.0.0.1:{self.port}/0" + (f"?{query}" if query else "")

    def args(self) -> list[str]:
        args = [self.binary, "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
                "--tls-cert-file", str(self.certs.server_cert), "--tls-key-file", str(self.certs.server_key),
                "--tls-ca-cert-file", str(self.certs.ca),
                "--tls-auth-clients", "yes" if self.require_client_cert else "no",
                "--save", "", "--appendonly", "no", "--dir", self.dir]  # fmt: skip
        for name, password in self.users.items():
            args += ["--user", name, "on", f">{password}", "~*", "&*", "+@all"]
        if self.default_password is not None:
            args += ["--requirepass", self.default_password]
        return args

    def start(self, timeout_s: float = 10.0) -> None:
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        context = ssl.create_default_context(cafile=str(self.certs.ca))
        context.load_cert_chain(str(self.certs.client_cert), str(self.certs.client_key))
        context.check_hostname = False  # a server made for the hostname-mismatch case must still be seen up
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                    with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(64)[:1] in (b"+", b"-"):  # PONG, or NOAUTH: it answers
                            return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"TLS redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
