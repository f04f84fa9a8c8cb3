"""Stateless console sessions: a signed, expiring cookie, so every gateway replica accepts it.

A value is ``base64url(json).base64url(hmac_sha256(secret, kind:json))``; one that is tampered with,
signed with another secret or past its ``exp`` reads as None, and so does one of another ``kind``
(the login cookie sent as the session cookie, or back), since the kind is under the MAC. The CSRF
token is an HMAC of the session id under the same secret: the page reads it from a second (not
HttpOnly) cookie and sends it back as ``x-csrf-token``; a site that cannot read our cookies cannot
forge it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

CSRF_HEADER = "x-csrf-token"
SESSION = "session"
"""The kind of the console's session cookie."""
LOGIN = "login"
"""The kind of the cookie that holds a login in progress (state, nonce, PKCE verifier)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, data: bytes) -> str:
    return _b64(hmac.new(secret, data, hashlib.sha256).digest())


def sign(secret: bytes, kind: str, payload: dict[str, Any]) -> str:
    """``payload`` (with an ``exp`` in epoch seconds) as a signed cookie value of ``kind``."""
    data = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return f"{_b64(data)}.{_mac(secret, kind.encode() + b':' + data)}"


def unsign(secret: bytes, kind: str, value: str | None, now: float) -> dict[str, Any] | None:
    """The payload of a value ``sign`` made with ``secret`` for ``kind``, or None (absent, forged, of
    another kind, expired)."""
    if not value or value.count(".") != 1:
        return None
    body, mac = value.split(".")
    try:
        data = _unb64(body)
    except ValueError:
        return None
    if not hmac.compare_digest(mac, _mac(secret, kind.encode() + b":" + data)):
        return None
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("exp"), int | float):
        return None
    return payload if now < payload["exp"] else None


def csrf_token(secret: bytes, session_id: str) -> str:
    """The CSRF token bound to one session."""
    return _mac(secret, b"csrf:" + session_id.encode())


def csrf_ok(secret: bytes, session_id: str, header: str | None) -> bool:
    """Does the ``x-csrf-token`` header carry this session's token?"""
    return header is not None and hmac.compare_digest(header, csrf_token(secret, session_id))
