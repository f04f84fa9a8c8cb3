"""End to end against a real provider process: bearer JWTs on the admin API, the console's login
(PKCE, state, nonce), its cookies, CSRF on changes, and logout. The gateway runs in-process (ASGI);
httpx follows redirects between it and the provider."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import httpx
import msgspec
import pytest

from gateway.app import create_app
from gateway.audit import AuditTrail, FileAuditStore
from gateway.policy import parse_policy
from gateway.reloader import PolicyReloader
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.settings import Settings
from gateway.stores import MemoryStore
from tests.gateway.sso.conftest import ROLE_MAPPING
from tests.support.oidc_provider import OidcProvider

ADMIN_KEY = "sk-admin-test"
SECRET = "a-test-session-secret-0123456789"


def _app_client(
    provider: OidcProvider, *, secure: bool, audit: AuditTrail | None = None
) -> httpx.AsyncClient:
    document = {
        "pools": {"small": {"replicas": [{"base_url": "http://engine:8000/v1", "model": "m"}]}},
        "keys": [{"sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest(), "tenant": "ops", "admin": True}],
        "sso": {
            "issuer": provider.issuer,
            "client_id": "console",
            "audience": "sortyard-admin",
            "role_mapping": ROLE_MAPPING,
            "tenant_claim": "tenant",
            "cookie": {"secure": secure},
        },
    }
    reloader = PolicyReloader("unused.yaml", policy=parse_policy(document, "test"))
    upstream = MemoryUpstreamClient(lambda url, body, headers: Reply.json({}))
    app = create_app(Settings(), client=upstream, reloader=reloader, store=MemoryStore(), audit=audit)
    mounts = {"http://gateway": httpx.ASGITransport(app=app), "all://": httpx.AsyncHTTPTransport()}
    return httpx.AsyncClient(mounts=mounts, base_url="http://gateway")


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SORTYARD_SESSION_SECRET", SECRET)


@pytest.fixture
def trail() -> AuditTrail:
    return AuditTrail(FileAuditStore(None))  # in memory


@pytest.fixture
async def gateway(provider: OidcProvider, trail: AuditTrail) -> AsyncIterator[httpx.AsyncClient]:
    async with _app_client(provider, secure=False, audit=trail) as client:
        yield client


def _error(response: httpx.Response) -> dict[str, str]:
    return dict(msgspec.json.decode(response.content)["error"])


async def test_a_provider_token_reads_the_admin_api(
    provider: OidcProvider, gateway: httpx.AsyncClient
) -> None:
    bearer = {"authorization": f"Bearer {provider.mint()}"}
    assert (await gateway.get("/v1/admin/policy", headers=bearer)).status_code == 200
    assert (await gateway.get("/v1/usage", headers=bearer)).status_code == 200
    keys = await gateway.get("/v1/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert keys.status_code == 200  # an sk- key still goes through the key check


@pytest.mark.parametrize(
    ("mint", "message"),
    [
        ({"claims": {"exp": int(time.time()) - 3600}}, "expired"),
        ({"aud": "console-other"}, "wrong audience"),
        ({"kid": "nobody"}, "unknown key"),
        ({"stranger": True}, "signature"),
    ],
    ids=["expired", "audience", "kid", "signature"],
)
async def test_a_bad_token_is_a_401_invalid_token(
    provider: OidcProvider, gateway: httpx.AsyncClient, mint: dict[str, object], message: str
) -> None:
    response = await gateway.get(
        "/v1/admin/policy", headers={"authorization": f"Bearer {provider.mint(**mint)}"}
    )
    assert response.status_code == 401
    error = _error(response)
    assert error["code"] == "invalid_token" and message in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_roles_come_from_groups(provider: OidcProvider, gateway: httpx.AsyncClient) -> None:
    viewer = {"authorization": f"Bearer {provider.mint(claims={'groups': ['ops-viewers']})}"}
    assert (await gateway.get("/v1/admin/pools", headers=viewer)).status_code == 200
    refused = await gateway.get("/v1/admin/keys", headers=viewer)  # keys.read: admin or tenant-admin
    assert refused.status_code == 403 and _error(refused)["code"] == "insufficient_role"
    nobody = {"authorization": f"Bearer {provider.mint(claims={'groups': ['staff']})}"}
    response = await gateway.get("/v1/admin/pools", headers=nobody)
    assert response.status_code == 403 and _error(response)["code"] == "no_role"


async def test_login_sets_hardened_cookies(provider: OidcProvider) -> None:
    async with _app_client(provider, secure=True) as client:
        login = await client.get("/console/login")
        assert login.status_code == 302
        sent = parse_qs(urlsplit(login.headers["location"]).query)
        assert sent["code_challenge_method"] == ["S256"] and sent["state"] and sent["nonce"]
        assert sent["redirect_uri"] == ["http://gateway/console/callback"]
        at_provider = await client.get(login.headers["location"])  # auto-approves, back with a code
        assert at_provider.status_code == 302
        callback = at_provider.headers["location"]
        # a Secure cookie is not sent back over http: hand the login cookie over as the browser would
        pending = login.cookies["sy_session_login"]
        wrong_state = callback.replace("state=", "state=x")
        refused = await client.get(wrong_state, cookies={"sy_session_login": pending})
        assert refused.status_code == 401 and "state" in _error(refused)["message"]
        done = await client.get(callback, cookies={"sy_session_login": pending})
        assert done.status_code == 302 and done.headers["location"] == "/console"
        cookies = {c.split("=", 1)[0]: c.lower() for c in done.headers.get_list("set-cookie")}
        session, csrf = cookies["sy_session"], cookies["sy_session_csrf"]
        assert "httponly" in session and "secure" in session and "samesite=lax" in session
        assert "max-age=28800" in session
        assert "httponly" not in csrf and "secure" in csrf  # the page reads it to send x-csrf-token


async def test_the_console_session_with_csrf_and_logout(gateway: httpx.AsyncClient) -> None:
    page = await gateway.get("/console/login", follow_redirects=True)
    assert page.status_code == 200 and str(page.url) == "http://gateway/console"
    assert (await gateway.get("/v1/admin/policy")).status_code == 200  # by the session cookie
    csrf = gateway.cookies["sy_session_csrf"]
    refused = await gateway.post("/v1/admin/keys", json={"tenant": "acme"})
    assert refused.status_code == 403 and _error(refused)["code"] == "csrf_failed"
    forged = await gateway.post("/v1/admin/keys", json={"tenant": "acme"}, headers={"x-csrf-token": "x"})
    assert forged.status_code == 403
    made = await gateway.post("/v1/admin/keys", json={"tenant": "acme"}, headers={"x-csrf-token": csrf})
    assert made.status_code == 200, made.text
    assert (await gateway.post("/console/logout")).status_code == 403  # logout needs it too
    out = await gateway.post("/console/logout", headers={"x-csrf-token": csrf})
    assert out.status_code == 200 and "sy_session" not in gateway.cookies
    assert (await gateway.get("/v1/admin/policy")).status_code == 401


async def test_sign_in_and_sign_out_are_on_the_audit_trail(
    gateway: httpx.AsyncClient, trail: AuditTrail
) -> None:
    await gateway.get("/console/login", follow_redirects=True)
    csrf = gateway.cookies["sy_session_csrf"]
    assert (await gateway.post("/console/logout", headers={"x-csrf-token": csrf})).status_code == 200
    entries = [msgspec.json.decode(line) for line in await trail.store.lines()]
    signs = [(e["action"], e["outcome"], e["status"]) for e in entries if e["action"].startswith("console.")]
    assert signs == [("console.sign_in", "ok", 200), ("console.sign_out", "ok", 200)]
    users = {e["actor"] for e in entries if e["action"].startswith("console.")}
    assert users and "-" not in users  # the provider's user, by name


async def test_a_tampered_session_is_refused(gateway: httpx.AsyncClient) -> None:
    response = await gateway.get("/v1/admin/policy", headers={"cookie": "sy_session=e30.forged"})
    assert response.status_code == 401 and _error(response)["code"] == "invalid_token"
