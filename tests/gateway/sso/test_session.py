"""Signed session cookies and their CSRF tokens: what a forger, a replay after expiry, or another
secret gets."""

from __future__ import annotations

from gateway.sso.session import csrf_ok, csrf_token, sign, unsign

SECRET = b"s" * 32


def test_a_signed_value_reads_back_until_it_expires() -> None:
    value = sign(SECRET, {"sid": "a", "exp": 100})
    assert unsign(SECRET, value, now=99) == {"sid": "a", "exp": 100}
    assert unsign(SECRET, value, now=100) is None


def test_tampering_or_another_secret_reads_as_none() -> None:
    value = sign(SECRET, {"sid": "a", "role": "viewer", "exp": 100})
    body, mac = value.split(".")
    forged = sign(b"x" * 32, {"sid": "a", "role": "admin", "exp": 100}).split(".")[0]
    assert unsign(SECRET, f"{forged}.{mac}", now=0) is None
    assert unsign(b"other" * 8, value, now=0) is None
    for junk in (None, "", "abc", "a.b.c", "!!.??", f"{body}.{mac}x"):
        assert unsign(SECRET, junk, now=0) is None


def test_a_payload_without_expiry_is_refused() -> None:
    assert unsign(SECRET, sign(SECRET, {"sid": "a"}), now=0) is None


def test_the_csrf_token_is_bound_to_its_session() -> None:
    token = csrf_token(SECRET, "sid-1")
    assert csrf_ok(SECRET, "sid-1", token)
    assert not csrf_ok(SECRET, "sid-2", token)
    assert not csrf_ok(SECRET, "sid-1", None)
    assert not csrf_ok(b"other" * 8, "sid-1", token)
