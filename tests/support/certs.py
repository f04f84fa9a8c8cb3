"""Certificates for TLS tests, made on the fly with ``cryptography``: a CA, and server and client
certificates it signs (EC P-256, for 127.0.0.1 and localhost), written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    """A certificate and key on disk, and the certificate's serial number."""

    cert: Path
    key: Path
    serial: int


class CertificateAuthority:
    """A self-signed CA that issues leaf certificates into ``directory``."""

    def __init__(self, directory: Path, name: str = "Sortyard test CA") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.path = directory / f"{name.replace(' ', '-')}.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, name: str, *, client: bool = False, cert: Path | None = None, key: Path | None = None
    ) -> Issued:
        """A leaf for ``name`` (a server for 127.0.0.1/localhost, or a client), written to ``cert`` and
        ``key`` (default: ``<name>.pem`` and ``<name>.key`` in the directory; files are replaced whole)."""
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(leaf_key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if not client:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        signed = builder.sign(self.key, hashes.SHA256())
        cert = cert or self.directory / f"{name}.pem"
        key = key or self.directory / f"{name}.key"
        _replace(key, leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ))  # fmt: skip
        _replace(cert, signed.public_bytes(serialization.Encoding.PEM))
        return Issued(cert, key, serial)


def _replace(path: Path, data: bytes) -> None:
    """Write a new file beside ``path`` and rename it over: a reader sees the old file or the new one."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(data)
    fresh.replace(path)
