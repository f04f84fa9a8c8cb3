"""The auth stage: who is calling, and whether it may set its own priority."""

from __future__ import annotations

import pytest

from gateway.client_limits import ClientLimiter
from gateway.errors import AuthenticationFailed, InvalidRequest, RateLimited
from gateway.stages.auth import Authenticate
from gateway.stores import MemoryStore
from tests.support.calls import USER_HI, api_key, build_call, compile_doc, policy_doc

KEY, STANZA = api_key("acme", name="ci")
PRIORITY_KEY, PRIORITY_STANZA = api_key("globex", allow_client_priority=True)
REQUIRED = compile_doc(policy_doc(auth={"required": True}, keys=[STANZA, PRIORITY_STANZA]))
OPEN = compile_doc(policy_doc(auth={"required": False, "anonymous_tenant": "guests"}, keys=[STANZA]))


async def test_a_known_key_names_the_tenant() -> None:
    call = build_call(REQUIRED, key=KEY, authenticated=False)
    await Authenticate()(call)
    assert call.key is not None and call.key.key_id == "ci" and call.tenant == "acme"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "didn't provide an API key"),
        ({"Authorization": "Bearer sk-sy-unknown"}, "Incorrect API key"),
        ({"Authorization": "Bearer " + "x" * 300}, "Incorrect API key"),
        ({"Authorization": "Basic abc"}, "Malformed Authorization header"),
        ({"Authorization": "Bearer a b"}, "Malformed Authorization header"),
    ],
)
async def test_a_missing_unknown_or_malformed_key_is_401(headers: dict[str, str], message: str) -> None:
    call = build_call(REQUIRED, headers=headers)
    with pytest.raises(AuthenticationFailed, match=message) as raised:
        await Authenticate()(call)
    assert raised.value.status == 401 and call.key is None


async def test_an_open_policy_lets_anonymous_callers_in_and_still_knows_its_keys() -> None:
    anonymous = build_call(OPEN, headers={"Authorization": "Bearer sk-sy-whatever"})
    await Authenticate()(anonymous)
    assert anonymous.key is None and anonymous.tenant == "guests"
    known = build_call(OPEN, key=KEY, authenticated=False)
    await Authenticate()(known)
    assert known.tenant == "acme"


async def test_a_client_priority_needs_a_key_that_may_set_it() -> None:
    body = {"model": "small", "messages": USER_HI, "priority": 1}
    call = build_call(REQUIRED, body, key=KEY, authenticated=False)
    with pytest.raises(InvalidRequest) as raised:
        await Authenticate()(call)
    assert (raised.value.code, raised.value.param) == ("priority_not_allowed", "priority")
    allowed = build_call(REQUIRED, body, key=PRIORITY_KEY, authenticated=False)
    await Authenticate()(allowed)
    assert allowed.body["priority"] == 1


async def test_a_null_priority_is_dropped_and_a_non_integer_refused() -> None:
    call = build_call(
        REQUIRED, {"model": "small", "messages": USER_HI, "priority": None}, key=KEY, authenticated=False
    )
    await Authenticate()(call)
    assert "priority" not in call.body
    call = build_call(
        REQUIRED, {"model": "small", "messages": USER_HI}, key=PRIORITY_KEY, authenticated=False
    )
    call.body["priority"] = True  # a bool is not a priority
    with pytest.raises(InvalidRequest) as raised:
        await Authenticate()(call)
    assert raised.value.code == "invalid_value"


async def test_failures_count_against_the_client_and_a_valid_key_is_never_refused() -> None:
    compiled = compile_doc(
        policy_doc(
            auth={"required": True}, keys=[STANZA], limits={"unauthenticated": {"failed_auths_per_minute": 1}}
        )
    )
    clients = ClientLimiter(MemoryStore())
    wrong = {"Authorization": "Bearer sk-sy-unknown"}
    first = build_call(compiled, headers=wrong, authenticated=False)
    first.peer = "203.0.113.7"
    with pytest.raises(AuthenticationFailed):
        await Authenticate(clients)(first)
    second = build_call(compiled, headers=wrong, authenticated=False)
    second.peer = "203.0.113.7"
    with pytest.raises(RateLimited) as raised:
        await Authenticate(clients)(second)
    assert raised.value.code == "too_many_auth_failures"
    valid = build_call(compiled, key=KEY, authenticated=False)
    valid.peer = "203.0.113.7"
    await Authenticate(clients)(valid)
    assert valid.tenant == "acme"
