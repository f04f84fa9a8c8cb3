"""Who is calling (checked from the headers, before the body), and whether it may set its own priority."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pytest

from gateway.authentication import authenticate, authenticate_client
from gateway.client_limits import ClientLimiter
from gateway.compiled import CompiledPolicy
from gateway.errors import AuthenticationFailed, InvalidRequest, RateLimited
from gateway.lifecycle import new_call
from gateway.pipeline import Call, Endpoint
from gateway.stores import MemoryStore
from tests.support.calls import USER_HI, api_key, compile_doc, policy_doc

KEY, STANZA = api_key("acme", name="ci")
PRIORITY_KEY, PRIORITY_STANZA = api_key("globex", allow_client_priority=True)
REQUIRED = compile_doc(policy_doc(auth={"required": True}, keys=[STANZA, PRIORITY_STANZA]))
OPEN = compile_doc(policy_doc(auth={"required": False, "anonymous_tenant": "guests"}, keys=[STANZA]))


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def open_call(compiled: CompiledPolicy, body: Mapping[str, object], key: str) -> Call:
    """A call as the request's owner opens it: authenticated, then decoded."""
    headers = bearer(key)
    found = authenticate(compiled, headers)
    return new_call(Endpoint.CHAT, headers, msgspec.json.encode(body), compiled, "req", 0.0, key=found)


def test_a_known_key_names_the_tenant() -> None:
    key = authenticate(REQUIRED, bearer(KEY))
    assert key is not None and key.key_id == "ci" and key.tenant == "acme"
    call = open_call(REQUIRED, {"model": "small", "messages": USER_HI}, KEY)
    assert call.key == key and call.tenant == "acme"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "didn't provide an API key"),
        ({"authorization": "Bearer sk-sy-unknown"}, "Incorrect API key"),
        ({"authorization": "Bearer " + "x" * 300}, "Incorrect API key"),
        ({"authorization": "Basic abc"}, "Malformed Authorization header"),
        ({"authorization": "Bearer a b"}, "Malformed Authorization header"),
    ],
)
def test_a_missing_unknown_or_malformed_key_is_401(headers: dict[str, str], message: str) -> None:
    with pytest.raises(AuthenticationFailed, match=message) as raised:
        authenticate(REQUIRED, headers)
    assert raised.value.status == 401


def test_an_open_policy_lets_anonymous_callers_in_and_still_knows_its_keys() -> None:
    assert authenticate(OPEN, bearer("sk-sy-whatever")) is None
    anonymous = open_call(OPEN, {"model": "small", "messages": USER_HI}, "sk-sy-whatever")
    assert anonymous.key is None and anonymous.tenant == "guests"
    assert open_call(OPEN, {"model": "small", "messages": USER_HI}, KEY).tenant == "acme"


def test_a_client_priority_needs_a_key_that_may_set_it() -> None:
    body = {"model": "small", "messages": USER_HI, "priority": 1}
    with pytest.raises(InvalidRequest) as raised:
        open_call(REQUIRED, body, KEY)
    assert (raised.value.code, raised.value.param) == ("priority_not_allowed", "priority")
    allowed = open_call(REQUIRED, body, PRIORITY_KEY)
    assert allowed.body["priority"] == 1 and allowed.priority == 1


def test_a_null_priority_is_dropped_and_a_non_integer_refused() -> None:
    call = open_call(REQUIRED, {"model": "small", "messages": USER_HI, "priority": None}, KEY)
    assert "priority" not in call.body and call.priority is None
    with pytest.raises(InvalidRequest) as raised:
        open_call(REQUIRED, {"model": "small", "messages": USER_HI, "priority": True}, PRIORITY_KEY)
    assert raised.value.code == "invalid_value"


async def test_failures_count_against_the_client_and_a_valid_key_is_never_refused() -> None:
    compiled = compile_doc(
        policy_doc(
            auth={"required": True}, keys=[STANZA], limits={"unauthenticated": {"failed_auths_per_minute": 1}}
        )
    )
    clients = ClientLimiter(MemoryStore())
    wrong = bearer("sk-sy-unknown")
    peer = "203.0.113.7"
    with pytest.raises(AuthenticationFailed):
        await authenticate_client(compiled, wrong, peer, clients)
    with pytest.raises(RateLimited) as raised:
        await authenticate_client(compiled, wrong, peer, clients)
    assert raised.value.code == "too_many_auth_failures"
    valid = await authenticate_client(compiled, bearer(KEY), peer, clients)
    assert valid is not None and valid.tenant == "acme"
