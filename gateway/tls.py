"""TLS: the gateway terminates it itself, and speaks it to upstreams with a CA bundle of your choice.

Serving (``sortyard serve --tls-cert CERT --tls-key KEY``, or ``SORTYARD_TLS_CERTFILE`` /
``SORTYARD_TLS_KEYFILE``): uvicorn builds the server context (TLS 1.2 at least) and hands it to
``reloading_context``, which watches the two files from the serving event loop and loads them again
when either changes (its modification time, inode or size), as Kubernetes swaps a Secret's files on
rotation: connections opened after the change get the new certificate, open ones keep theirs. A pair
that fails to load (a half-written file) is logged and tried again on the next look; the old pair keeps
serving meanwhile. ``--tls-client-ca`` asks clients for certificates signed by that CA
(``--tls-client-auth required``, the default with a CA, or ``optional``).

Upstreams: ``SORTYARD_UPSTREAM_CA_BUNDLE`` verifies ``https`` replicas against that bundle instead of
the system's, and ``SORTYARD_UPSTREAM_CLIENT_CERT`` / ``_KEY`` present a client certificate to them
(mutual TLS to the engines) (``upstream_context``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

__all__ = [
    "CLIENT_AUTH",
    "CertificateReloader",
    "reloading_context",
    "upstream_context",
    "uvicorn_tls_options",
]

logger = logging.getLogger("sortyard.tls")

CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
"""``--tls-client-auth``: whether clients must present a certificate signed by ``--tls-client-ca``."""

Signature = tuple[tuple[int, int, int] | None, ...]


class TlsSettings(Protocol):
    """What this module reads of ``gateway.settings.Settings``."""

    @property
    def tls_certfile(self) -> str | None: ...
    @property
    def tls_keyfile(self) -> str | None: ...
    @property
    def tls_client_ca(self) -> str | None: ...
    @property
    def tls_client_auth(self) -> str | None: ...
    @property
    def tls_reload_s(self) -> float: ...
    @property
    def upstream_ca_bundle(self) -> str | None: ...
    @property
    def upstream_client_cert(self) -> str | None: ...
    @property
    def upstream_client_key(self) -> str | None: ...


def _signature(*paths: str | None) -> Signature:
    """What changes when a file is replaced or rewritten (stat follows a Secret's symlinks)."""
    marks: list[tuple[int, int, int] | None] = []
    for path in paths:
        if path is None:
            marks.append(None)
            continue
        try:
            stat = os.stat(path)
        except OSError:
            marks.append(None)
        else:
            marks.append((stat.st_mtime_ns, stat.st_ino, stat.st_size))
    return tuple(marks)


class CertificateReloader:
    """Loads a context's certificate and key again when their files change (``check``), every
    ``interval_s`` once ``start``ed on an event loop (the one whose server handshakes with it, so a
    reload never races a handshake)."""

    def __init__(
        self,
        context: ssl.SSLContext,
        certfile: str,
        keyfile: str | None,
        *,
        password: str | None = None,
        interval_s: float = 1.0,
        on_reload: Callable[[], None] | None = None,
    ) -> None:
        self.context = context
        self.certfile = certfile
        self.keyfile = keyfile
        self.password = password
        self.interval_s = interval_s
        self.on_reload = on_reload
        self.num_reloads = 0
        self._seen = _signature(certfile, keyfile)
        self._handle: asyncio.TimerHandle | None = None

    def check(self) -> bool:
        """Reload if the files changed since the last load; True when a new pair was loaded."""
        seen = _signature(self.certfile, self.keyfile)
        if seen == self._seen:
            return False
        try:
            self.context.load_cert_chain(self.certfile, self.keyfile, self.password)
        except (OSError, ssl.SSLError, ValueError) as error:  # mid-rotation: try again next time
            logger.warning("TLS certificate %s not reloaded (kept the old one): %s", self.certfile, error)
            return False
        self._seen = seen
        self.num_reloads += 1
        logger.info("TLS certificate %s reloaded", self.certfile)
        if self.on_reload is not None:
            self.on_reload()
        return True

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        def tick() -> None:
            self.check()
            self._handle = loop.call_later(self.interval_s, tick)

        self._handle = loop.call_later(self.interval_s, tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def reloading_context(
    config: Any, default: Callable[[], ssl.SSLContext], *, reload_s: float
) -> ssl.SSLContext:
    """uvicorn's ``ssl_context_factory``: its own context (certificate, key, client CA, ALPN), TLS 1.2 at
    least, reloaded on change while the serving loop runs (called from it, in every worker)."""
    context = default()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not serving from here (a parent that only binds the socket)
        return context
    if reload_s > 0:
        certfile = os.fspath(config.ssl_certfile)
        keyfile = os.fspath(config.ssl_keyfile) if config.ssl_keyfile else None
        reloader = CertificateReloader(
            context, certfile, keyfile, password=config.ssl_keyfile_password, interval_s=reload_s
        )
        reloader.start(loop)
    return context


def uvicorn_tls_options(settings: TlsSettings) -> dict[str, Any]:
    """The ``uvicorn.Config`` options that serve TLS with ``settings``' files (none without a cert)."""
    if not settings.tls_certfile:
        return {}
    options: dict[str, Any] = {
        "ssl_certfile": settings.tls_certfile,
        "ssl_keyfile": settings.tls_keyfile,
        "ssl_context_factory": partial(reloading_context, reload_s=settings.tls_reload_s),
    }
    if settings.tls_client_ca:
        options["ssl_ca_certs"] = settings.tls_client_ca
        options["ssl_cert_reqs"] = CLIENT_AUTH[settings.tls_client_auth or "required"]
    return options


def upstream_context(settings: TlsSettings) -> ssl.SSLContext | None:
    """The context ``https`` replicas are reached with: the system's trust unless a CA bundle is given,
    and a client certificate when one is; None: the upstream client's default."""
    if not settings.upstream_ca_bundle and not settings.upstream_client_cert:
        return None
    context = ssl.create_default_context(cafile=settings.upstream_ca_bundle or None)
    if settings.upstream_client_cert:
        context.load_cert_chain(settings.upstream_client_cert, settings.upstream_client_key or None)
    return context
