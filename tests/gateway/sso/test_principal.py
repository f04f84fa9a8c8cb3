"""Groups -> one role (the most powerful), the tenant claim, and the key the admin routes take."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import PermissionDenied
from gateway.policy import load_policy
from gateway.roles import Principal
from gateway.sso.principal import as_api_key, principal_from_claims
from tests.gateway.sso.conftest import sso_config

CONFIG = sso_config("https://idp.example")


def test_the_most_powerful_mapped_role_wins() -> None:
    claims = {"sub": "u1", "groups": ["ops-viewers", "ops-admins", "unrelated"]}
    assert principal_from_claims(CONFIG, claims) == Principal("sso:u1", None, "admin")


def test_a_single_string_group_and_the_tenant_claim() -> None:
    claims = {"sub": "u2", "preferred_username": "bob", "groups": "acme-admins", "tenant": "acme"}
    assert principal_from_claims(CONFIG, claims) == Principal("sso:bob", "acme", "tenant-admin")


def test_a_custom_groups_claim() -> None:
    config = sso_config("https://idp.example", groups_claim="roles")
    assert principal_from_claims(config, {"sub": "u", "roles": ["ops-viewers"]}).role == "viewer"


@pytest.mark.parametrize("groups", [None, [], ["unrelated"], [1, 2]])
def test_no_mapped_group_is_refused(groups: object) -> None:
    with pytest.raises(PermissionDenied) as refused:
        principal_from_claims(CONFIG, {"sub": "u", "groups": groups})
    assert refused.value.code == "no_role"


@pytest.mark.parametrize("tenant", [None, "", 5, ["acme"], "no spaces allowed"])
def test_a_tenant_admin_without_a_tenant_name_is_refused(tenant: object) -> None:
    """It used to act on a made-up tenant ("sso", "5", ...) shared by every such user, and could mint
    keys there."""
    claims = {"sub": "u", "groups": ["acme-admins"], "tenant": tenant}
    with pytest.raises(PermissionDenied) as refused:
        principal_from_claims(CONFIG, claims)
    assert refused.value.code == "no_tenant"
    admin = principal_from_claims(CONFIG, {**claims, "groups": ["ops-admins"]})
    assert admin == Principal("sso:u", None, "admin")  # above tenants: an odd claim is ignored


def test_a_tenant_with_a_slash_is_kept_whole() -> None:
    principal = principal_from_claims(CONFIG, {"sub": "u", "groups": ["acme-admins"], "tenant": "org/acme"})
    assert as_api_key(principal).tenant == "org/acme"


def test_the_key_gives_the_principal_back() -> None:
    principal = Principal("sso:alice@example.com", "acme", "tenant-admin")
    key = as_api_key(principal)
    assert Principal.of_key(key) == Principal("sso:alice_example.com", "acme", "tenant-admin")
    assert not key.admin and key.sha256 == as_api_key(principal).sha256


def test_the_shipped_example_maps_its_groups() -> None:
    policy = load_policy(Path(__file__).resolve().parents[3] / "policies" / "examples" / "sso.yaml")
    assert policy.sso is not None and policy.sso.expected_audience == "sortyard-admin"
    claims = {"sub": "u", "groups": ["platform-readers", "platform-oncall"], "tenant": "acme"}
    assert principal_from_claims(policy.sso, claims).role == "operator"
