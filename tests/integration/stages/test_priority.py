"""Scheduling priority comes from the policy: the upstream sees the key's or tenant's ``priority``,
and a client's own only when its key allows it (never more urgent than the policy's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

TENANTS = new_key()  # tenant acme (priority 7), no priority of its own
URGENT = new_key()  # tenant acme, priority 1
TRUSTED = new_key()  # tenant acme, priority 5, may send its own
FREE = new_key()  # tenant solo (no priority), may send its own
PLAIN = new_key()  # tenant solo, nothing: no priority at all
MESSAGES: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayServer, FakeUpstream]]:
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["auth"] = {"required": False, "anonymous_tenant": "guests"}
    document["keys"] = [
        {"sha256": hash_key(TENANTS), "tenant": "acme", "name": "tenants"},
        {"sha256": hash_key(URGENT), "tenant": "acme", "name": "urgent", "priority": 1},
        {
            "sha256": hash_key(TRUSTED),
            "tenant": "acme",
            "name": "trusted",
            "priority": 5,
            "allow_client_priority": True,
        },
        {"sha256": hash_key(FREE), "tenant": "solo", "name": "free", "allow_client_priority": True},
        {"sha256": hash_key(PLAIN), "tenant": "solo", "name": "plain"},
    ]
    document["tenants"] = {"acme": {"priority": 7}, "guests": {"priority": 20}}
    gateway = GatewayServer(write_policy(tmp_path_factory.mktemp("priority") / "p.yaml", document)).start()
    yield gateway, upstream
    gateway.stop()
    upstream.stop()


def _sent(setup: tuple[GatewayServer, FakeUpstream], key: str, **extra: Any) -> dict[str, Any]:
    """The body the upstream received for one chat request with ``key`` (and ``extra`` fields)."""
    gateway, upstream = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)
    before = len(upstream.requests)
    client.chat.completions.create(model="small", messages=MESSAGES, extra_body=extra or None)
    assert len(upstream.requests) == before + 1
    return upstream.requests[-1]


@pytest.mark.parametrize(
    ("key", "expected"),
    [(TENANTS, 7), (URGENT, 1), (TRUSTED, 5), ("sk-anonymous", 20)],
    ids=["tenant", "key", "key-over-tenant", "anonymous-tenant"],
)
def test_the_upstream_gets_the_policy_priority(
    setup: tuple[GatewayServer, FakeUpstream], key: str, expected: int
) -> None:
    assert _sent(setup, key)["priority"] == expected


def test_no_policy_priority_sends_none(setup: tuple[GatewayServer, FakeUpstream]) -> None:
    assert "priority" not in _sent(setup, PLAIN)
    assert "priority" not in _sent(setup, PLAIN, priority=None)  # an explicit null is dropped


@pytest.mark.parametrize(
    "key", [TENANTS, URGENT, PLAIN, "sk-anonymous"], ids=["tenant", "key", "plain", "anonymous"]
)
@pytest.mark.parametrize("given", [0, 99, -5])
def test_a_client_priority_its_key_may_not_set_is_refused(
    setup: tuple[GatewayServer, FakeUpstream], key: str, given: int
) -> None:
    gateway, upstream = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)
    before = len(upstream.requests)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                model="small", messages=MESSAGES, stream=stream, extra_body={"priority": given}
            )
        assert info.value.code == "priority_not_allowed"
        assert info.value.param == "priority"
        assert info.value.type == "invalid_request_error"
    assert len(upstream.requests) == before  # never forwarded


def test_an_allowed_client_priority_is_forwarded_but_never_above_the_policy(
    setup: tuple[GatewayServer, FakeUpstream],
) -> None:
    assert _sent(setup, TRUSTED, priority=9)["priority"] == 9  # later than the key's 5: as asked
    assert _sent(setup, TRUSTED, priority=5)["priority"] == 5
    assert _sent(setup, TRUSTED, priority=-3)["priority"] == 5  # earlier than the key's: the key's
    assert _sent(setup, FREE, priority=-3)["priority"] == -3  # no policy priority: as given
    assert "priority" not in _sent(setup, FREE)
    gateway, _ = setup
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {TRUSTED}"},
        json={"model": "small", "messages": MESSAGES, "priority": "high"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "priority"


def test_streams_and_embeddings_get_the_policy_priority(setup: tuple[GatewayServer, FakeUpstream]) -> None:
    gateway, upstream = setup
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=TENANTS, max_retries=0, timeout=10)
    chunks = list(client.chat.completions.create(model="small", messages=MESSAGES, stream=True))
    assert chunks and upstream.requests[-1]["priority"] == 7
    client.embeddings.create(model="small", input=["a"], extra_headers={"Cache-Control": "no-store"})
    assert upstream.requests[-1]["input"] == ["a"] and upstream.requests[-1]["priority"] == 7
