"""Process settings, read once from the environment (``SORTYARD_*``) and frozen."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources import files

from gateway.replicas.config import REGION_NAME

TLS_CLIENT_AUTH = ("required", "optional", "none")
"""``--tls-client-auth``: whether clients must present a certificate (``gateway.tls``)."""

LOCAL_POLICY = "policies/default.yaml"
"""The policy a clone serves (``make run``): a link to the default policy the package carries."""


def default_policy_path() -> str:
    """``policies/default.yaml`` when the working directory has one (a clone), else the default policy
    inside the installed package (``pip install sortyard``)."""
    if os.path.exists(LOCAL_POLICY):
        return LOCAL_POLICY
    return str(files("gateway.policy") / "default.yaml")


@dataclass(frozen=True, slots=True)
class Settings:
    """How this gateway process runs; what it serves is the policy's business."""

    policy_path: str = field(default_factory=default_policy_path)
    """The policy YAML file."""
    policy_overlay: str | None = None
    """A git-ignored overlay merged on top (local keys); default: ``local.yaml`` beside the policy, or
    ``.local/local.yaml`` when the policy is the one inside the installed package."""
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    """Worker processes (each with its own event loop)."""
    log_level: str = "info"
    access_log_file: str | None = None
    """A file for the access log (one JSON line a request); None: standard output. ``sortyard run``
    uses ``.local/access.log`` unless the user asked for the lines (``SORTYARD_ACCESS_LOG`` or the
    policy's ``telemetry.access_log``)."""
    reload_interval_s: float = 1.0
    """How often the policy files are checked for changes."""
    keys_file: str | None = None
    """Where keys made through the admin API are kept when no Redis is configured (this host's
    workers share the file; ``sortyard run`` uses ``.sortyard/keys.json``); None: memory only.
    With Redis (the policy's ``store``) they live there, shared by every replica."""
    audit_file: str | None = None
    """The audit trail's JSONL file when no Redis is configured (``gateway.audit``; ``sortyard run``
    uses ``.local/audit.jsonl``); None: memory only. With Redis it lives there (``sy:{audit}:chain``)."""
    keys_refresh_s: float = 0.5
    """How often each process checks the key store for changes: a key made, changed or revoked on
    one replica is honoured or refused on every other within this plus one store round trip."""
    max_upstream_connections: int = 1024
    """Size of the upstream connection pool per process."""
    upstream_keepalive_s: float = 4.0
    """How long an idle upstream connection stays pooled. Below the servers' own idle timeout (5 s in
    uvicorn, so vLLM and the reference engine, and in llama.cpp's server), so the gateway never sends a
    request on a connection the server is closing at that moment, which fails it unanswered."""
    hard_max_body_bytes: int = 64 * 1024 * 1024
    """A ceiling above any policy's ``limits.max_body_bytes``."""
    header_read_timeout_s: float = 10.0
    """A request's headers must arrive within this many seconds, or it gets 408 and the connection closes."""
    body_read_timeout_s: float = 30.0
    """A proxied request's whole body must arrive within this many seconds, or it gets 408."""
    drain_file: str | None = None
    """Where the workers of one ``--workers N`` instance mark an admin drain, so that every worker's
    ``/readyz`` fails (``gateway.drain_mark``); ``gateway serve`` sets it for its workers. None: the
    drain stays in the process that answered ``POST /v1/admin/drain``."""
    drain_delay_s: float = 0.0
    """On SIGTERM ``/readyz`` fails at once, but the gateway keeps accepting connections this many
    seconds more, so a load balancer (Kubernetes endpoints) can stop sending before the port closes."""
    drain_timeout_s: float = 25.0
    """After the delay the gateway stops accepting connections and lets open requests (streams
    included) finish for at most this long (uvicorn's ``timeout_graceful_shutdown``), then cuts what is
    left; either way every request is settled before exit. Delay + timeout + a few seconds of settling
    should fit Kubernetes' grace period (30 s by default)."""

    tls_certfile: str | None = None
    """Serve HTTPS with this certificate (PEM, the chain after it); ``tls_keyfile`` is its key. Both are
    loaded again when they change (``gateway.tls``)."""
    tls_keyfile: str | None = None
    tls_client_ca: str | None = None
    """Ask clients for a certificate signed by this CA bundle (mutual TLS)."""
    tls_client_auth: str | None = None
    """``required`` (the default with a client CA) or ``optional``; ``none`` ignores the CA."""
    tls_reload_s: float = 1.0
    """How often the certificate files are checked for a change; 0: never reloaded."""
    upstream_ca_bundle: str | None = None
    """Verify ``https`` replicas against this CA bundle instead of the system's."""
    upstream_client_cert: str | None = None
    """A client certificate for ``https`` replicas that ask for one; ``upstream_client_key`` its key."""
    upstream_client_key: str | None = None
    region: str | None = None
    """This gateway's region (``SORTYARD_REGION``): it wins over the policy's ``routing.regions.local``,
    so one policy serves gateways in several regions. Named as a policy's regions are
    (``gateway.replicas.config.REGION_NAME``), since it goes into response headers and metric labels."""

    def __post_init__(self) -> None:
        if self.region == "":  # ``SORTYARD_REGION=`` in a manifest or compose file: not set
            object.__setattr__(self, "region", None)
        object.__setattr__(self, "log_level", self.log_level.lower())  # INFO is info (uvicorn's names)
        if self.region is not None and not REGION_NAME.match(self.region):
            raise ValueError(
                f"SORTYARD_REGION={self.region!r} is not a region name "
                "(a letter or digit, then letters, digits, '.', '_', '-'; 63 at most)"
            )
        if bool(self.tls_certfile) != bool(self.tls_keyfile):
            raise ValueError("TLS needs both a certificate and its key (SORTYARD_TLS_CERTFILE and _KEYFILE)")
        if self.tls_client_auth is not None and self.tls_client_auth not in TLS_CLIENT_AUTH:
            raise ValueError(f"SORTYARD_TLS_CLIENT_AUTH must be one of {', '.join(TLS_CLIENT_AUTH)}")
        if self.tls_client_ca and not self.tls_certfile:
            raise ValueError("a client CA (SORTYARD_TLS_CLIENT_CA) needs TLS (a certificate and key)")
        if self.upstream_keepalive_s <= 0:
            raise ValueError("SORTYARD_UPSTREAM_KEEPALIVE_S must be > 0")

    @property
    def overlay_path(self) -> str:
        if self.policy_overlay is not None:
            return self.policy_overlay
        if os.path.abspath(self.policy_path) == os.path.abspath(
            str(files("gateway.policy") / "default.yaml")
        ):
            return ".local/local.yaml"  # never beside the package's own file
        return os.path.join(os.path.dirname(self.policy_path) or ".", "local.yaml")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name, field_type in (
            ("policy_path", str),
            ("policy_overlay", str),
            ("host", str),
            ("port", int),
            ("workers", int),
            ("log_level", str),
            ("access_log_file", str),
            ("reload_interval_s", float),
            ("keys_file", str),
            ("audit_file", str),
            ("keys_refresh_s", float),
            ("max_upstream_connections", int),
            ("upstream_keepalive_s", float),
            ("header_read_timeout_s", float),
            ("body_read_timeout_s", float),
            ("drain_file", str),
            ("drain_delay_s", float),
            ("drain_timeout_s", float),
            ("tls_certfile", str),
            ("tls_keyfile", str),
            ("tls_client_ca", str),
            ("tls_client_auth", str),
            ("tls_reload_s", float),
            ("upstream_ca_bundle", str),
            ("upstream_client_cert", str),
            ("upstream_client_key", str),
            ("region", str),
        ):
            raw = env.get(f"SORTYARD_{name.upper()}")
            if raw is not None:
                values[name] = field_type(raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
