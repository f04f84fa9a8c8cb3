"""What an admin may do to keys at run time, and what each action does to the keys requests present."""

from __future__ import annotations

import msgspec
import pytest

from gateway.errors import Conflict, InvalidRequest, NotFound
from gateway.keys import FileKeyStore, KeyAdmin, KeyRegistry
from gateway.keys.hashing import hash_key
from gateway.keys.records import KeyChanges, KeySpec, LimitChanges
from gateway.policy import Policy, RateLimits, parse_policy

POLICY_KEY = "sk-policy-admin"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def policy() -> Policy:
    document = {
        "version": 1,
        "pools": {
            "small": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "echo"}]},
            "large": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "echo"}]},
        },
        "aliases": {"gpt-4o-mini": "small"},
        "keys": [{"sha256": hash_key(POLICY_KEY), "tenant": "ops", "name": "root", "admin": True}],
        "store": {"url_env": None},
    }
    return parse_policy(document, "test")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def admin(clock: Clock) -> KeyAdmin:
    return KeyAdmin(KeyRegistry(FileKeyStore(None), clock=clock))


async def test_a_created_key_opens_once_made_and_its_secret_is_shown_only_then(
    admin: KeyAdmin, policy: Policy
) -> None:
    made = await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci", models=("gpt-4o-mini",)))
    assert made.key is not None and made.key.startswith("sk-sy-") and made.status == "active"
    key = admin.registry.find(hash_key(made.key))
    assert key is not None and (key.tenant, key.key_id, key.models) == ("team-a", "ci", ("gpt-4o-mini",))
    shown = await admin.show(policy, "ci")
    assert shown.key is None and shown.fingerprints == (hash_key(made.key)[:12],)
    assert made.key not in msgspec.json.encode(await admin.views(policy)).decode()
    assert made.key not in msgspec.json.encode(await admin.audit(10)).decode()


async def test_names_are_unique_across_the_policy_and_the_api(admin: KeyAdmin, policy: Policy) -> None:
    await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci"))
    for name in ("ci", "root"):
        with pytest.raises(Conflict):
            await admin.create(policy, "root", KeySpec(tenant="team-a", name=name))
    generated = await admin.create(policy, "root", KeySpec(tenant="team-a"))
    assert generated.name.startswith("key-")


async def test_the_policy_files_keys_are_listed_but_never_changed(admin: KeyAdmin, policy: Policy) -> None:
    views = await admin.views(policy)
    assert [(v.name, v.source) for v in views] == [("root", "policy")]
    for act in (
        admin.revoke(policy, "root", "root"),
        admin.rotate(policy, "root", "root", 0),
        admin.update(policy, "root", "root", KeyChanges(admin=False)),
    ):
        with pytest.raises(Conflict) as info:
            await act
        assert info.value.code == "key_in_policy"
    with pytest.raises(NotFound):
        await admin.revoke(policy, "root", "nobody")


async def test_an_update_changes_what_the_key_carries(admin: KeyAdmin, policy: Policy) -> None:
    made = await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci"))
    assert made.key is not None
    changes = KeyChanges(limits=LimitChanges(requests_per_minute=5), pools=("large",))
    updated = await admin.update(policy, "root", "ci", changes)
    assert updated.revision == 2
    key = admin.registry.find(hash_key(made.key))
    assert key is not None and key.limits == RateLimits(requests_per_minute=5) and key.pools == ("large",)
    await admin.update(policy, "root", "ci", KeyChanges(limits=None))
    key = admin.registry.find(hash_key(made.key))
    assert key is not None and key.limits is None and key.pools == ("large",)  # only what was given
    with pytest.raises(InvalidRequest) as info:
        await admin.update(policy, "root", "ci", KeyChanges(pools=("nope",)))
    assert info.value.param == "pools"


async def test_limits_given_alone_keep_the_others(admin: KeyAdmin, policy: Policy) -> None:
    limits = RateLimits(requests_per_minute=60)
    await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci", limits=limits))
    changes = KeyChanges(limits=LimitChanges(tokens_per_minute=100_000))
    updated = await admin.update(policy, "root", "ci", changes)
    assert updated.limits == RateLimits(requests_per_minute=60, tokens_per_minute=100_000)
    assert (await admin.audit(1))[0].changes == {"limits": {"tokens_per_minute": 100_000}}  # what was given
    removed = await admin.update(
        policy, "root", "ci", KeyChanges(limits=LimitChanges(requests_per_minute=None))
    )
    assert removed.limits == RateLimits(tokens_per_minute=100_000)


async def test_a_revoked_key_is_not_changed(admin: KeyAdmin, policy: Policy) -> None:
    await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci"))
    await admin.revoke(policy, "root", "ci")
    with pytest.raises(Conflict) as info:
        await admin.update(policy, "root", "ci", KeyChanges(expires_at=None))
    assert info.value.code == "key_revoked"
    assert (await admin.show(policy, "ci")).revision == 2 and (await admin.audit(1))[0].action == "revoke"


async def test_a_rotated_key_keeps_its_old_secret_for_the_grace_period(
    admin: KeyAdmin, policy: Policy, clock: Clock
) -> None:
    made = await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci"))
    rotated = await admin.rotate(policy, "root", "ci", 60)
    assert made.key is not None and rotated.key is not None and rotated.key != made.key
    old, new = hash_key(made.key), hash_key(rotated.key)
    assert admin.registry.find(old) is not None and admin.registry.find(new) is not None
    clock.now += 60
    assert admin.registry.find(old) is None and admin.registry.find(new) is not None
    assert (await admin.show(policy, "ci")).fingerprints == (new[:12],)
    again = await admin.rotate(policy, "root", "ci", 0)  # no grace: the old one stops at once
    assert again.key is not None
    assert admin.registry.find(new) is None and admin.registry.find(hash_key(again.key)) is not None


async def test_a_revoked_or_expired_key_opens_nothing(admin: KeyAdmin, policy: Policy, clock: Clock) -> None:
    revoked = await admin.create(policy, "root", KeySpec(tenant="team-a", name="gone"))
    expiring = await admin.create(policy, "root", KeySpec(tenant="team-a", expires_at=clock.now + 10))
    assert revoked.key is not None and expiring.key is not None
    assert (await admin.revoke(policy, "root", "gone")).status == "revoked"
    assert admin.registry.find(hash_key(revoked.key)) is None
    assert admin.registry.find(hash_key(expiring.key)) is not None
    clock.now += 10
    assert admin.registry.find(hash_key(expiring.key)) is None
    assert (await admin.show(policy, expiring.name)).status == "expired"
    with pytest.raises(Conflict):
        await admin.rotate(policy, "root", "gone", 60)


async def test_every_action_is_in_the_audit_trail_with_who_did_it(admin: KeyAdmin, policy: Policy) -> None:
    await admin.create(policy, "root", KeySpec(tenant="team-a", name="ci"))
    await admin.update(policy, "ops-bot", "ci", KeyChanges(admin=True))
    await admin.rotate(policy, "root", "ci", 5)
    await admin.revoke(policy, "root", "ci")
    await admin.revoke(policy, "root", "ci")  # a second revoke changes nothing and is not recorded
    trail = [(e.actor, e.action, e.key, e.changes) for e in await admin.audit(10)]
    assert trail == [
        ("root", "revoke", "ci", {}),
        ("root", "rotate", "ci", {"grace_s": 5}),
        ("ops-bot", "update", "ci", {"admin": True}),
        ("root", "create", "ci", {}),
    ]


async def test_another_replicas_change_is_seen_at_the_next_refresh(policy: Policy) -> None:
    store = FileKeyStore(None)
    here, there = KeyRegistry(store), KeyRegistry(store)
    made = await KeyAdmin(here).create(policy, "root", KeySpec(tenant="team-a", name="ci"))
    assert made.key is not None and there.find(hash_key(made.key)) is None
    await there.refresh()
    assert there.find(hash_key(made.key)) is not None
    await KeyAdmin(here).revoke(policy, "root", "ci")
    await there.refresh()
    assert there.find(hash_key(made.key)) is None
