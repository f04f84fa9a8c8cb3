"""The caches' policy: defaults, validation, per-pool overrides."""

from __future__ import annotations

import msgspec
import pytest
import yaml

from gateway.cache import CacheConfig

DOC = """
response: {ttl_s: 60, max_entry_bytes: 2048}
affinity: {chunk_bytes: 512, max_load_factor: 2.0}
embeddings: {ttl_s: 3600}
pools:
  creative: {cache_nondeterministic: true, ttl_s: 5}
  private: {response: false, affinity: false}
"""


def test_defaults() -> None:
    config = CacheConfig()
    assert config.response.enabled and config.response.ttl_s == 300
    assert config.response.max_entry_bytes == 1_048_576
    assert config.response.cache_nondeterministic is False
    assert config.response.hits_consume_tokens is False
    assert config.response.scope == "tenant"
    assert config.affinity.ttl_s == 600 and config.affinity.max_load_factor == 1.5


def test_parse_and_per_pool_overrides() -> None:
    config = msgspec.convert(yaml.safe_load(DOC), CacheConfig, strict=True)
    assert config.response_for("small") is config.response
    creative = config.response_for("creative")
    assert (creative.cache_nondeterministic, creative.ttl_s, creative.max_entry_bytes) == (True, 5, 2048)
    assert config.response_for("private").enabled is False
    assert config.affinity_enabled_for("private") is False
    assert config.affinity_enabled_for("creative") is True


@pytest.mark.parametrize(
    "doc",
    [
        {"response": {"ttl": 5}},  # unknown field
        {"response": {"ttl_s": 0}},
        {"response": {"scope": "everyone"}},
        {"affinity": {"max_load_factor": 0.5}},
        {"pools": {"x": {"cache_nondeterministic": "yes"}}},
    ],
)
def test_bad_config_is_rejected(doc: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(doc, CacheConfig, strict=True)
