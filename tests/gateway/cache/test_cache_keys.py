"""Canonical request hashing, cacheability, key names and the Cache-Control directives."""

from __future__ import annotations

import pytest

from gateway.cache import CacheKeys, embedding_options, is_cacheable, read_directives, request_hash

BODY = {
    "model": "small",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    "temperature": 0,
    "max_tokens": 16,
}


def test_field_order_does_not_change_the_hash() -> None:
    reordered = {
        "max_tokens": 16,
        "temperature": 0,
        "messages": [{"content": "Be brief.", "role": "system"}, {"content": "Hi", "role": "user"}],
        "model": "small",
    }
    assert request_hash("chat", BODY) == request_hash("chat", reordered)


@pytest.mark.parametrize(
    "extra",
    [
        {"stream": True},
        {"stream": True, "stream_options": {"include_usage": True}},
        {"user": "alice"},
        {"metadata": {"trace": "x"}},
        {"temperature": 0.0},  # 0 and 0.0 are one key
    ],
)
def test_fields_that_do_not_change_the_answer_are_ignored(extra: dict[str, object]) -> None:
    assert request_hash("chat", {**BODY, **extra}) == request_hash("chat", BODY)


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.5},
        {"max_tokens": 17},
        {"seed": 1},
        {"n": 2},
        {"stop": ["\n"]},
        {"top_p": 0.9},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"response_format": {"type": "json_object"}},
        {"logprobs": True},
        {"model": "large"},
        {"messages": [{"role": "user", "content": "Hi!"}]},
    ],
)
def test_fields_that_change_the_answer_change_the_hash(change: dict[str, object]) -> None:
    assert request_hash("chat", {**BODY, **change}) != request_hash("chat", BODY)


def test_the_endpoint_is_part_of_the_hash() -> None:
    assert request_hash("chat", BODY) != request_hash("completions", BODY)


@pytest.mark.parametrize(
    ("body", "cacheable"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0, "n": 1}, True),
        ({"temperature": 0.7, "seed": 42}, True),
        ({"seed": 0}, True),
        ({}, False),  # the default temperature samples
        ({"temperature": 0.7}, False),
        ({"temperature": 0, "n": 3}, False),
        ({"temperature": False}, False),
        ({"temperature": None, "seed": None}, False),
    ],
)
def test_only_deterministic_requests_are_cacheable_by_default(
    body: dict[str, object], cacheable: bool
) -> None:
    assert is_cacheable(body) is cacheable


def test_a_pool_may_opt_in_to_caching_sampled_requests() -> None:
    assert is_cacheable({"temperature": 1.2, "n": 2}, pool_opt_in=True)


def test_keys_are_hash_tagged_per_tenant_and_never_shared() -> None:
    keys = CacheKeys()
    digest = request_hash("chat", BODY)
    a = keys.response("tenant-a", "small", digest)
    b = keys.response("tenant-b", "small", digest)
    assert a == f"sy:{{t:tenant-a}}:rc:small:{digest}"
    assert a != b
    assert keys.response("tenant-a", "large", digest) != a


def test_a_tenant_name_cannot_escape_its_hash_tag() -> None:
    keys = CacheKeys()
    key = keys.response("evil}x", "small", "d")
    assert key.startswith("sy:{t:evil%7Dx}:")
    assert key.index("}") == len("sy:{t:evil%7Dx")


def test_global_scope_shares_entries_across_tenants() -> None:
    keys = CacheKeys()
    digest = request_hash("chat", BODY)
    assert keys.response("a", "small", digest, "global") == keys.response("b", "small", digest, "global")


def test_the_lock_shares_the_entrys_hash_tag() -> None:
    key = CacheKeys().response("acme", "small", "abc")
    assert CacheKeys.lock(key) == key + ":lock"


def test_embedding_keys_depend_on_input_model_options_and_tenant() -> None:
    keys = CacheKeys()
    one = keys.embeddings("acme", "mini", ["a", "b", "a", [1, 2]])
    assert one[0] == one[2] and len(set(one)) == 3
    assert all(k.startswith("sy:{t:acme}:em:mini:") for k in one)
    assert keys.embeddings("other", "mini", ["a"])[0] != one[0]
    assert keys.embeddings("acme", "big", ["a"])[0] != one[0]
    assert keys.embeddings("acme", "mini", ["a"], options={"dimensions": 64})[0] != one[0]
    shared = keys.embeddings("x", "mini", ["a"], scope="global")[0]
    assert shared == keys.embeddings("y", "mini", ["a"], scope="global")[0]


def test_embedding_options_keep_only_fields_that_change_the_vectors() -> None:
    body = {"model": "m", "input": ["a"], "user": "u", "encoding_format": "base64", "dimensions": 8}
    assert embedding_options(body) == {"encoding_format": "base64", "dimensions": 8}


@pytest.mark.parametrize(
    ("header", "may_read", "may_store"),
    [
        (None, True, True),
        ("", True, True),
        ("max-age=0", True, True),
        ("no-cache", False, True),
        ("No-Cache", False, True),
        ("no-store", False, False),
        ("max-age=10, no-store", False, False),
    ],
)
def test_cache_control_directives(header: str | None, may_read: bool, may_store: bool) -> None:
    directives = read_directives(header)
    assert (directives.may_read, directives.may_store) == (may_read, may_store)
    assert directives.is_bypass is (not may_read)
