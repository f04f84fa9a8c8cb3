"""One OpenID provider process for the single sign-on tests (``tests.support.oidc_provider``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.policy.sso import SsoConfig
from tests.support.oidc_provider import OidcProvider

ROLE_MAPPING = {"ops-admins": "admin", "ops-viewers": "viewer", "acme-admins": "tenant-admin"}


@pytest.fixture(scope="session")
def provider() -> Iterator[OidcProvider]:
    running = OidcProvider("--client-id", "console", "--audience", "sortyard-admin", "--groups", "ops-admins")
    yield running
    running.stop()


def sso_config(issuer: str, **changes: object) -> SsoConfig:
    fields: dict[str, object] = {
        "issuer": issuer,
        "client_id": "console",
        "audience": "sortyard-admin",
        "role_mapping": ROLE_MAPPING,
        "tenant_claim": "tenant",
        **changes,
    }
    return SsoConfig(**fields)  # type: ignore[arg-type]
