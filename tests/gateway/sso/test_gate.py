"""Who ``SingleSignOn`` lets through, and what it leaves to the API key check."""

from __future__ import annotations

import pytest

from gateway.errors import ServiceUnavailable
from gateway.sso.errors import InvalidToken
from gateway.sso.gate import SingleSignOn
from gateway.sso.session import LOGIN, SESSION, sign
from tests.gateway.sso.conftest import sso_config

CONFIG = sso_config("https://idp.example")
ENV = {"SORTYARD_SESSION_SECRET": "0123456789abcdef0123"}


async def test_sso_off_or_an_api_key_is_left_to_the_key_check() -> None:
    sso = SingleSignOn(environ=ENV)
    assert await sso.admin_key(None, "GET", {"authorization": "Bearer a.b.c"}, {}) is None
    for header in ("Bearer sk-abc.def.ghi", "Bearer sk-plain", "Basic a.b.c"):
        assert await sso.admin_key(CONFIG, "GET", {"authorization": header}, {}) is None
    assert await sso.admin_key(CONFIG, "GET", {}, {}) is None


async def test_a_session_round_trip_and_its_csrf() -> None:
    sso = SingleSignOn(environ=ENV, clock=lambda: 1000.0)
    cookie, csrf = sso.new_session(CONFIG, {"sub": "u", "groups": ["ops-viewers"], "tenant": "acme"})
    cookies = {"sy_session": cookie}
    key = await sso.admin_key(CONFIG, "GET", {}, cookies)
    assert key is not None and key.role == "viewer" and key.tenant == "acme"
    assert (await sso.admin_key(CONFIG, "DELETE", {"x-csrf-token": csrf}, cookies)) is not None
    later = SingleSignOn(environ=ENV, clock=lambda: 1000.0 + CONFIG.cookie.max_age_s)
    with pytest.raises(Exception, match="expired"):
        await later.admin_key(CONFIG, "GET", {}, cookies)


@pytest.mark.parametrize(
    "payload",
    [
        {"state": "s", "nonce": "n", "verifier": "v", "redirect": "r", "exp": 2000},  # the login cookie's
        {"sid": "a", "claims": "not a mapping", "exp": 2000},
        {"sid": 5, "claims": {}, "exp": 2000},
    ],
)
async def test_a_session_cookie_of_another_kind_or_shape_is_a_401_not_a_500(
    payload: dict[str, object],
) -> None:
    sso = SingleSignOn(environ=ENV, clock=lambda: 1000.0)
    secret = sso.secret(CONFIG)
    kind = LOGIN if "state" in payload else SESSION
    cookies = {"sy_session": sign(secret, kind, payload)}
    with pytest.raises(InvalidToken, match="invalid or expired"):
        await sso.admin_key(CONFIG, "GET", {}, cookies)


async def test_sessions_need_a_real_secret() -> None:
    with pytest.raises(ServiceUnavailable) as refused:
        SingleSignOn(environ={"SORTYARD_SESSION_SECRET": "short"}).secret(CONFIG)
    assert refused.value.code == "sso_misconfigured"
