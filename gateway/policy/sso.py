"""The ``sso:`` policy section: who the OpenID provider is and how its users become principals.

Off unless present: a policy without ``sso:`` never imports authlib. The secrets themselves never sit
in the policy, only the names of the environment variables that hold them.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

Seconds = Annotated[float, msgspec.Meta(ge=0)]
Role = Literal["admin", "operator", "viewer", "tenant-admin"]


class CookieConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The console's session cookie (stateless: signed, so every gateway replica accepts it)."""

    name: str = "sy_session"
    """The session cookie's name; the CSRF cookie is this name + ``_csrf``."""
    secret_env: str = "SORTYARD_SESSION_SECRET"
    """Environment variable holding the HMAC key that signs cookies (32+ random bytes)."""
    secure: bool = True
    """Send the cookie over HTTPS only. Turn off only for tests on http://127.0.0.1."""
    max_age_s: Annotated[int, msgspec.Meta(gt=0)] = 8 * 3600
    """How long a console session lasts; the signed expiry is checked on every call."""


class SsoConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An OpenID Connect provider: JWT bearer tokens for the admin API, login for the console."""

    issuer: str
    """The provider's issuer URL; ``<issuer>/.well-known/openid-configuration`` is its discovery document."""
    client_id: str
    """The gateway's client at the provider (the console's login uses it)."""
    audience: str | None = None
    """The ``aud`` a bearer token must carry; None: ``client_id``."""
    client_secret_env: str | None = None
    """Environment variable holding the client secret; None: a public client (PKCE only)."""
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    """Scopes the console's login asks for."""
    groups_claim: str = "groups"
    """The claim holding the user's groups (a list of strings, or one string)."""
    role_mapping: dict[str, Role] = msgspec.field(default_factory=dict)
    """Group -> role; a user in several groups gets the most powerful role. No mapped group: refused."""
    tenant_claim: str | None = None
    """The claim naming the user's tenant (for ``tenant-admin``); None: no tenant."""
    leeway_s: Seconds = 60.0
    """Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
    jwks_cache_s: Seconds = 300.0
    """How long the discovery document and the signing keys are kept."""
    jwks_refetch_floor_s: Seconds = 10.0
    """The least time between two refetches on an unknown ``kid`` (a flood of forged kids fetches once)."""
    redirect_url: str | None = None
    """The console's callback as the provider knows it (``https://gw.example.com/console/callback``);
    None: built from the request."""
    algorithms: tuple[Literal["RS256", "ES256"], ...] = ("RS256", "ES256")
    """Signature algorithms accepted (never ``none``, never HMAC with a public key)."""
    cookie: CookieConfig = CookieConfig()

    @property
    def expected_audience(self) -> str:
        return self.audience or self.client_id
