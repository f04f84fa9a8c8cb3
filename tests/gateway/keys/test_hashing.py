"""gateway/keys/hashing.py: a key's secret, its hash, the policy's stanza for it, and looking keys up by
that hash (the policy's, then those made at run time)."""

from __future__ import annotations

import hashlib
import re

import yaml

from gateway.keys.hashing import KEY_PREFIX, KeyIndex, hash_key, key_stanza, new_key
from gateway.policy import ApiKey, Policy, parse_policy


def policy(*keys: dict[str, object]) -> Policy:
    replica = {"base_url": "http://127.0.0.1:9/v1", "model": "echo"}
    document = {"pools": {"small": {"replicas": [replica]}}, "keys": list(keys), "store": {"url_env": None}}
    return parse_policy(document, "test")


class Directory:
    """Keys made at run time, by hash (``gateway.keys.KeyRegistry`` in the gateway)."""

    def __init__(self, *keys: ApiKey) -> None:
        self.by_hash = {key.sha256: key for key in keys}

    def find(self, sha256: str) -> ApiKey | None:
        return self.by_hash.get(sha256)


def test_a_new_key_is_prefixed_and_holds_256_random_bits() -> None:
    keys = {new_key() for _ in range(100)}
    assert len(keys) == 100
    assert all(re.fullmatch(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{43}", key) for key in keys), keys


def test_the_hash_is_the_sha256_of_the_text() -> None:
    assert hash_key("sk-sy-abc") == hashlib.sha256(b"sk-sy-abc").hexdigest()


def test_the_stanza_holds_the_hash_only_and_parses_as_the_policys_key() -> None:
    key = new_key()
    stanza = key_stanza(key, "acme", "ci")
    assert key not in stanza
    (parsed,) = policy(*yaml.safe_load(stanza)).keys
    assert (parsed.sha256, parsed.tenant, parsed.key_id) == (hash_key(key), "acme", "ci")
    (unnamed,) = policy(*yaml.safe_load(key_stanza(key, "acme"))).keys
    assert unnamed.key_id == hash_key(key)[:12]


def test_the_index_finds_the_policys_keys_then_the_directorys() -> None:
    in_policy, made, unknown = new_key(), new_key(), new_key()
    index = KeyIndex(policy({"sha256": hash_key(in_policy), "tenant": "acme"}))
    run_time = ApiKey(sha256=hash_key(made), tenant="beta", name="made")
    found = index.lookup(in_policy, Directory(run_time))
    assert found is not None and found.tenant == "acme"
    assert index.lookup(made) is None
    assert index.lookup(made, Directory(run_time)) == run_time
    assert index.lookup(unknown, Directory(run_time)) is None


def test_a_key_may_use_its_pools_and_models_or_everything_when_it_names_none() -> None:
    index = KeyIndex(policy())
    everything = ApiKey(sha256="0" * 64, tenant="acme")
    scoped = ApiKey(sha256="1" * 64, tenant="acme", pools=("small",), models=("alias",))
    assert index.may_use(everything, "any-model", "large")
    assert index.may_use(scoped, "echo", "small")
    assert index.may_use(scoped, "alias", "large")
    assert not index.may_use(scoped, "echo", "large")
