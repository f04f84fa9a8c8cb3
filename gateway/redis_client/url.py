"""RedisTarget: what a Redis URL says (where, how to log in, TLS, which topology), parsed once.

The URL forms follow redis-py's, so a managed Redis's URL can be pasted as is:

- ``redis://[[user]:password@]host[:port][/db]``: one node, plaintext; ``rediss://`` for TLS.
  A password alone is sent as ``AUTH password``; with a user (an ACL user) as ``AUTH user password``.
- TLS options in the query, spelled as redis-py spells them: ``ssl_ca_certs`` (a CA bundle file; the
  system's CAs without it), ``ssl_cert_reqs`` (``required``, the default, or ``none``),
  ``ssl_check_hostname`` (``true``, the default here, or ``false``), ``ssl_certfile`` and
  ``ssl_keyfile`` (a client certificate, for mutual TLS).
- ``redis+sentinel://[[user]:password@]host:26379[,host:26379...]/service[/db]`` (``rediss+sentinel``
  for TLS to sentinels and primary): ask the sentinels for the primary of ``service``. The credentials
  are the primary's; ``sentinel_username`` / ``sentinel_password`` in the query are the sentinels'.
- ``redis+cluster://[[user]:password@]host:port[,host:port...]`` (``rediss+cluster``): Redis Cluster,
  the hosts being seeds for the slot map.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import parse_qsl, unquote

Mode = Literal["single", "sentinel", "cluster"]
Address = tuple[str, int]

_SCHEMES: dict[str, tuple[Mode, bool]] = {
    "redis": ("single", False),
    "rediss": ("single", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
_TLS_OPTIONS = {"ssl_ca_certs", "ssl_cert_reqs", "ssl_check_hostname", "ssl_certfile", "ssl_keyfile"}
_SENTINEL_OPTIONS = {"sentinel_username", "sentinel_password"}
_IGNORED_OPTIONS = {  # redis-py tuning options with no meaning for this client: accepted, unused
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "health_check_interval",
    "max_connections",
    "retry_on_timeout",
    "decode_responses",
    "protocol",
}


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL (see the module docstring for the forms)."""

    mode: Mode
    addresses: tuple[Address, ...]
    """The node (single), the sentinels, or the cluster's seed nodes."""
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None
    """The TLS context for every connection, or None for plaintext."""
    service: str | None = None
    """Sentinel: the monitored primary's name."""
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def node(self, address: Address) -> RedisTarget:
        """This target's credentials and TLS, for one node at ``address``."""
        return replace(self, mode="single", addresses=(address,), service=None)

    def sentinel(self, address: Address) -> RedisTarget:
        """A plain connection to one sentinel (its own credentials, db 0)."""
        return replace(
            self,
            mode="single",
            addresses=(address,),
            db=0,
            username=self.sentinel_username,
            password=self.sentinel_password,
            service=None,
        )

    def describe(self) -> str:
        """The URL's shape for messages, without secrets."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.addresses)
        return f"{self.mode} {'TLS' if self.tls else 'plaintext'} {hosts}"


def _address(text: str, default_port: int) -> Address:
    text = text.strip()
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":") or default_port)
    host, sep, port = text.rpartition(":")
    if not sep:
        return text or "127.0.0.1", default_port
    return host or "127.0.0.1", int(port)


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"Redis URL option {name}={value!r}: expected true or false")


def tls_context(options: dict[str, str]) -> ssl.SSLContext:
    """The client's TLS context from redis-py's ``ssl_*`` options; verifies the server by default."""
    context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
    reqs = options.get("ssl_cert_reqs", "required").lower()
    if reqs in ("none", "cert_none"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif reqs in ("optional", "cert_optional"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_OPTIONAL
    elif reqs not in ("required", "cert_required"):
        raise ValueError(f"Redis URL option ssl_cert_reqs={reqs!r}: expected required, optional or none")
    if "ssl_check_hostname" in options and context.verify_mode != ssl.CERT_NONE:
        context.check_hostname = _flag("ssl_check_hostname", options["ssl_check_hostname"])
    if "ssl_certfile" in options:
        context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"))
    elif "ssl_keyfile" in options:
        raise ValueError("Redis URL option ssl_keyfile needs ssl_certfile")
    return context


def parse_url(url: str) -> RedisTarget:
    """The RedisTarget of ``url``; raises ValueError naming what is wrong (never echoing a password)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("a Redis URL starts with redis://, rediss://, redis+sentinel:// or redis+cluster://")
    if scheme.lower() not in _SCHEMES:
        raise ValueError(f"unsupported Redis URL scheme {scheme!r} (expected one of {', '.join(_SCHEMES)})")
    mode, is_tls = _SCHEMES[scheme.lower()]
    rest, _, query = rest.partition("?")
    rest = rest.partition("#")[0]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None  # a user alone sends no AUTH (as redis-py)
    default_port = 26379 if mode == "sentinel" else 6379
    addresses = tuple(_address(part, default_port) for part in (hosts or "127.0.0.1").split(","))
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - _TLS_OPTIONS - _SENTINEL_OPTIONS - _IGNORED_OPTIONS - {"db"}
    if unknown:
        raise ValueError(f"unknown Redis URL option(s): {', '.join(sorted(unknown))}")
    if set(options) & _TLS_OPTIONS and not is_tls:
        raise ValueError(f"ssl_* options need a TLS scheme (rediss...), not {scheme}://")
    segments = [s for s in path.split("/") if s]
    service = None
    if mode == "sentinel":
        if not segments:
            raise ValueError("a sentinel URL names the primary: redis+sentinel://host:26379/<service>")
        service, segments = unquote(segments[0]), segments[1:]
    db = int(options.get("db") or (segments[0] if segments else 0))
    if mode == "cluster" and db != 0:
        raise ValueError("Redis Cluster has only db 0")
    if mode == "single" and len(addresses) != 1:
        raise ValueError(
            "a redis:// URL names one host; use redis+sentinel:// or redis+cluster:// for several"
        )
    return RedisTarget(
        mode=mode,
        addresses=addresses,
        db=db,
        username=username,
        password=password,
        tls=tls_context(options) if is_tls else None,
        service=service,
        sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None,
    )
