"""Who is calling: the API key, checked from the headers before a byte of the body is read.

``Authorization: Bearer <key>``; the key is hashed and looked up among the policy's hashes, then
among the keys made at run time (``gateway.keys``). A
missing, malformed, absurdly long or unknown key is a 401 ``invalid_api_key`` (unless the policy
lets anonymous calls through). The key's text goes no further than this module. Each 401 is counted
against the client's address (``gateway.client_limits``); past the policy's
``limits.unauthenticated.failed_auths_per_minute`` it becomes a 429 ``too_many_auth_failures``. A
valid key is never counted nor refused, whatever its address did.

The request's owner (``gateway.lifecycle``) authenticates first, so a caller without a valid key
never has its body read. A request's own ``priority`` (engines that schedule by it run lower values
first) would let any caller jump the queue: it is refused with a 400 ``priority_not_allowed``
unless the caller's key has ``allow_client_priority``. The policy's own priority is added when the
request is sent (``stages/upstream.py``), so it never enters cache keys.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.client_limits import ClientLimiter
from gateway.compiled import CompiledPolicy
from gateway.errors import AuthenticationFailed, InvalidRequest
from gateway.keys.hashing import MAX_KEY_LENGTH, KeyDirectory
from gateway.pipeline import Call
from gateway.policy import ApiKey


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


def check_priority(call: Call, key: ApiKey | None) -> None:
    """Refuse a request's own ``priority`` unless its key may set one (a ``null`` one is dropped)."""
    body = call.body
    if "priority" not in body:
        return
    given = body["priority"]
    if given is None:
        del body["priority"]
        return
    if key is None or not key.allow_client_priority:
        raise InvalidRequest(
            "`priority` is set by the gateway's policy; this API key may not set its own.",
            param="priority",
            code="priority_not_allowed",
        )
    if not isinstance(given, int) or isinstance(given, bool):
        raise InvalidRequest(
            "Invalid value for 'priority': expected an integer.", param="priority", code="invalid_value"
        )


def authenticate(
    compiled: CompiledPolicy, headers: Mapping[str, str], keys: KeyDirectory | None = None
) -> ApiKey | None:
    """The caller's key (the policy's, else one of ``keys``, made at run time), or None for an
    anonymous caller the policy lets through; AuthenticationFailed (401) otherwise. Every endpoint
    that needs a key asks this."""
    token = bearer_token(headers.get("authorization"))
    key = compiled.keys.lookup(token, keys) if token is not None else None
    if key is None and compiled.policy.auth.required:
        if token is None:
            raise AuthenticationFailed(
                "You didn't provide an API key. Send it as `Authorization: Bearer <API key>`."
            )
        raise AuthenticationFailed("Incorrect API key provided.")
    return key


async def authenticate_client(
    compiled: CompiledPolicy,
    headers: Mapping[str, str],
    peer: str | None,
    clients: ClientLimiter | None,
    keys: KeyDirectory | None = None,
) -> ApiKey | None:
    """``authenticate``, each failure counted against the client (``clients``; None: not counted):
    RateLimited (429) instead of the 401 once the client is past the policy's bound."""
    try:
        return authenticate(compiled, headers, keys)
    except AuthenticationFailed:
        if clients is not None:
            await clients.count_failure(compiled, peer, headers)
        raise
