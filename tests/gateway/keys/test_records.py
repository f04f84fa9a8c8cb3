"""gateway/keys/records.py: what a new key may be named, and how a PATCH's limits merge into a key's."""

from __future__ import annotations

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.keys.records import KeyChanges, KeyRecord, KeySpec, LimitChanges
from gateway.policy import RateLimits
from gateway.schemas import decode_as


@pytest.mark.parametrize("name", ["a/b", "/a", "a/", "a%2Fb", ".hidden", "a b"])
def test_a_key_name_is_one_path_segment(name: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_as(msgspec.json.encode({"tenant": "acme", "name": name}), KeySpec)
    assert info.value.param == "name"


def test_a_key_name_keeps_every_other_character_the_policy_allows() -> None:
    assert decode_as(b'{"tenant": "team/a", "name": "ci.v2:east-1_b"}', KeySpec).name == "ci.v2:east-1_b"


def test_a_stored_record_named_with_a_slash_still_loads() -> None:
    record = {"name": "a/b", "tenant": "acme", "secrets": [], "created_at": 0, "created_by": "root"}
    assert msgspec.convert(record, KeyRecord).name == "a/b"


def test_limit_changes_have_the_fields_of_rate_limits() -> None:
    assert LimitChanges.__struct_fields__ == RateLimits.__struct_fields__


def test_limits_merge_per_field_as_a_json_merge_patch() -> None:
    limits = RateLimits(requests_per_minute=60, max_concurrent=4)
    merged = LimitChanges(tokens_per_minute=1000, max_concurrent=None).merged(limits)
    assert merged == RateLimits(requests_per_minute=60, tokens_per_minute=1000)
    assert LimitChanges().merged(limits) == limits  # nothing given: nothing changes
    assert LimitChanges(requests_per_minute=None, max_concurrent=None).merged(limits) is None
    assert LimitChanges(requests_per_minute=5).merged(None) == RateLimits(requests_per_minute=5)


def test_limits_null_removes_them_all_and_left_out_keeps_them() -> None:
    record = KeyRecord("ci", "acme", (), 0.0, "root", limits=RateLimits(requests_per_minute=60))
    assert KeyChanges(limits=None).limits_of(record) is None
    assert KeyChanges(pools=()).limits_of(record) == record.limits
    patch = decode_as(b'{"limits": {"tokens_per_minute": 9}}', KeyChanges)
    assert patch.limits_of(record) == RateLimits(requests_per_minute=60, tokens_per_minute=9)
