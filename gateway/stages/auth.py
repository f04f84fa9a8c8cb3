"""Stage: authenticate the API key and name the tenant.

``Authorization: Bearer <key>``; the key is hashed and looked up among the policy's hashes. A
missing, malformed, absurdly long or unknown key is a 401 ``invalid_api_key`` (unless the policy
lets anonymous calls through). The key's text goes no further than this module.
"""

from __future__ import annotations

from gateway.errors import AuthenticationFailed
from gateway.keys import MAX_KEY_LENGTH, KeyIndex
from gateway.pipeline import Call
from gateway.policy import Policy


class KeyIndexCache:
    """The ``KeyIndex`` of the policy a call runs under (rebuilt when the policy changes)."""

    def __init__(self) -> None:
        self._policy: Policy | None = None
        self._index: KeyIndex | None = None

    def get(self, policy: Policy) -> KeyIndex:
        if self._policy is not policy or self._index is None:
            self._index, self._policy = KeyIndex(policy), policy
        return self._index


def bearer_token(header: str | None) -> str | None:
    """The key in an Authorization header; AuthenticationFailed when the header is malformed."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise AuthenticationFailed(
            "Malformed Authorization header: expected `Authorization: Bearer <API key>`."
        )
    if len(token) > MAX_KEY_LENGTH:
        raise AuthenticationFailed("Incorrect API key provided.")
    return token


class Authenticate:
    """Sets ``call.key`` and ``call.tenant``."""

    name = "auth"

    def __init__(self, keys: KeyIndexCache) -> None:
        self.keys = keys

    async def __call__(self, call: Call) -> None:
        policy = call.policy
        token = bearer_token(call.headers.get("authorization"))
        key = self.keys.get(policy).lookup(token) if token is not None else None
        if key is not None:
            call.key, call.tenant = key, key.tenant
            return
        if not policy.auth.required:
            call.tenant = policy.auth.anonymous_tenant
            return
        if token is None:
            raise AuthenticationFailed(
                "You didn't provide an API key. Send it as `Authorization: Bearer <API key>`."
            )
        raise AuthenticationFailed("Incorrect API key provided.")
