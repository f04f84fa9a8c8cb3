"""The ``guardrails:`` section: defaults, and names that pools and keys must get right."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequest
from gateway.guardrails.config import ALL_PII, GuardrailSet
from gateway.keys import FileKeyStore, KeyAdmin, KeyRegistry
from gateway.keys.hashing import hash_key
from gateway.keys.records import KeyChanges, KeySpec
from gateway.policy import PolicyError, parse_policy
from tests.support.calls import api_key, policy_doc


def test_defaults_and_parsing() -> None:
    document = policy_doc(guardrails={"strict": {"pii": {}, "block_list": {"words": ["x"]}}})
    document["pools"]["small"]["guardrails"] = ["strict"]
    policy = parse_policy(document, "p")
    strict = policy.guardrails["strict"]
    assert isinstance(strict, GuardrailSet) and strict.pii is not None
    assert strict.pii.detect == ALL_PII and strict.pii.action == "redact"
    assert strict.block_list is not None and strict.block_list.action == "block"
    assert policy.pools["small"].guardrails == ("strict",)


def test_unknown_names_are_refused() -> None:
    document = policy_doc()
    document["pools"]["small"]["guardrails"] = ["nope"]
    with pytest.raises(PolicyError, match=r"pools\.small\.guardrails: unknown guardrail set 'nope'"):
        parse_policy(document, "p")
    _, key = api_key("acme", guardrails=["missing"])
    with pytest.raises(PolicyError, match=r"keys\[0\].guardrails: unknown guardrail set 'missing'"):
        parse_policy(policy_doc(keys=[key]), "p")
    with pytest.raises(PolicyError, match="action"):
        parse_policy(policy_doc(guardrails={"s": {"pii": {"action": "shout"}}}), "p")


async def test_keys_made_through_the_admin_api_carry_their_sets() -> None:
    policy = parse_policy(policy_doc(guardrails={"strict": {"pii": {}}}), "p")
    admin = KeyAdmin(KeyRegistry(FileKeyStore(None)))
    view = await admin.create(policy, "root", KeySpec(tenant="acme", name="k1", guardrails=("strict",)))
    assert view.guardrails == ("strict",) and view.key is not None
    found = admin.registry.find(hash_key(view.key))
    assert found is not None and found.guardrails == ("strict",)  # what the request's Call carries
    with pytest.raises(InvalidRequest) as raised:
        await admin.update(policy, "root", "k1", KeyChanges(guardrails=("nope",)))
    assert raised.value.code == "unknown_guardrail" and raised.value.param == "guardrails"
    view = await admin.update(policy, "root", "k1", KeyChanges(guardrails=()))
    assert view.guardrails == ()
