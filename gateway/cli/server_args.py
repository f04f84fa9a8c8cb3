"""The flags ``sortyard serve`` and ``sortyard run`` share, checked before anything starts: a port,
worker count or log level out of range is refused by argparse, and the settings (flags and
``SORTYARD_*`` alike) are checked again, TLS files loaded once, so a typo ends in one ``error:`` line
and exit 2 rather than uvicorn's traceback or a banner for a port that cannot exist."""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Callable

from gateway.settings import TLS_CLIENT_AUTH, Settings

__all__ = ["LOG_LEVELS", "add_server_arguments", "settings_problem"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""uvicorn's log levels (``uvicorn.config.LOG_LEVELS``), named here so the CLI starts without uvicorn."""
MAX_PORT = 65535


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high`` (None: no upper bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"{low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"expected {bounds}, got {value}")
        return value

    return parse


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``serve`` and ``run`` (``gateway.settings.Settings``'s fields)."""
    p.add_argument(
        "--policy",
        help="policy YAML (default: policies/default.yaml if there is one here, else the package's)",
    )
    p.add_argument("--overlay", help="overlay YAML merged on top (default: local.yaml beside it)")
    p.add_argument("--host")
    p.add_argument("--port", type=int_in(1, MAX_PORT))
    p.add_argument("--workers", type=int_in(1))
    p.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS)
    p.add_argument("--tls-cert", dest="tls_certfile", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", dest="tls_keyfile", help="the certificate's private key (PEM)")
    p.add_argument("--tls-client-ca", dest="tls_client_ca", help="ask clients for certificates (this CA)")
    p.add_argument("--tls-client-auth", dest="tls_client_auth", choices=TLS_CLIENT_AUTH)


def _tls_problem(settings: Settings) -> str | None:
    """The TLS files loaded as uvicorn will load them: a missing or unreadable file, or one that is not
    PEM (or a key that is not the certificate's), is said here instead of in uvicorn's traceback."""
    if not settings.tls_certfile or not settings.tls_keyfile:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.tls_certfile, settings.tls_keyfile)
    except OSError as e:  # ssl.SSLError too
        return (
            f"the TLS certificate {settings.tls_certfile} and key {settings.tls_keyfile} "
            f"do not load: {e.strerror or e}"
        )
    if settings.tls_client_ca:
        try:
            context.load_verify_locations(settings.tls_client_ca)
        except OSError as e:
            return f"the client CA {settings.tls_client_ca} does not load: {e.strerror or e}"
    return None


def settings_problem(settings: Settings) -> str | None:
    """Why the server could not start with these settings (the environment's included), or None."""
    if not 1 <= settings.port <= MAX_PORT:
        return f"port {settings.port}: expected 1 to {MAX_PORT}"
    if settings.workers < 1:
        return f"workers {settings.workers}: expected at least 1"
    if settings.log_level not in LOG_LEVELS:
        return f"log level {settings.log_level!r}: expected one of {', '.join(LOG_LEVELS)}"
    return _tls_problem(settings)
