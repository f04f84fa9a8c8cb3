"""Signed session cookies and their CSRF tokens: what a forger, a replay after expiry, or another
secret gets."""

from __future__ import annotations

from gateway.sso.session import LOGIN, SESSION, csrf_ok, csrf_token, sign, unsign

SECRET = b"s" * 32


def test_a_signed_value_reads_back_until_it_expires() -> None:
    value = sign(SECRET, SESSION, {"sid": "a", "exp": 100})
    assert unsign(SECRET, SESSION, value, now=99) == {"sid": "a", "exp": 100}
    assert unsign(SECRET, SESSION, value, now=100) is None


def test_tampering_or_another_secret_reads_as_none() -> None:
    value = sign(SECRET, SESSION, {"sid": "a", "role": "viewer", "exp": 100})
    body, mac = value.split(".")
    forged = sign(b"x" * 32, SESSION, {"sid": "a", "role": "admin", "exp": 100}).split(".")[0]
    assert unsign(SECRET, SESSION, f"{forged}.{mac}", now=0) is None
    assert unsign(b"other" * 8, SESSION, value, now=0) is None
    for junk in (None, "", "abc", "a.b.c", "!!.??", f"{body}.{mac}x"):
        assert unsign(SECRET, SESSION, junk, now=0) is None


def test_a_payload_without_expiry_is_refused() -> None:
    assert unsign(SECRET, SESSION, sign(SECRET, SESSION, {"sid": "a"}), now=0) is None


def test_the_csrf_token_is_bound_to_its_session() -> None:
    token = csrf_token(SECRET, "sid-1")
    assert csrf_ok(SECRET, "sid-1", token)
    assert not csrf_ok(SECRET, "sid-2", token)
    assert not csrf_ok(SECRET, "sid-1", None)
    assert not csrf_ok(b"other" * 8, "sid-1", token)


def test_a_value_of_one_kind_reads_as_none_as_another() -> None:
    """The login cookie (state, nonce, verifier) sent as the session cookie, or back: signed with the
    same secret, it used to read back, and a session without ``sid`` or ``claims`` was a 500."""
    login = sign(SECRET, LOGIN, {"state": "s", "nonce": "n", "verifier": "v", "redirect": "r", "exp": 100})
    assert unsign(SECRET, LOGIN, login, now=0) is not None
    assert unsign(SECRET, SESSION, login, now=0) is None
    session = sign(SECRET, SESSION, {"sid": "a", "claims": {}, "exp": 100})
    assert unsign(SECRET, LOGIN, session, now=0) is None
