"""KVEventsConfig: vLLM's JSON keys, its publisher resolution, and clear refusals."""

from __future__ import annotations

import pytest

from backends.engine.kv_events.config import KVEventsConfig


def test_vllms_example_parses() -> None:
    cfg = KVEventsConfig.from_json(
        '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
        '"replay_endpoint": "tcp://*:5558", "topic": "kv"}'
    )
    assert cfg == KVEventsConfig(True, "zmq", "tcp://*:5557", "tcp://*:5558", topic="kv")
    assert cfg.is_enabled and cfg.buffer_steps == 10_000


def test_publisher_defaults_as_vllm_resolves_it() -> None:
    assert KVEventsConfig.from_json('{"enable_kv_cache_events": true}').publisher == "zmq"
    off = KVEventsConfig.from_json("{}")
    assert off.publisher == "null" and not off.is_enabled
    assert not KVEventsConfig(enable_kv_cache_events=True, publisher="null").is_enabled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"enable_kv_cache_events": true, "publisher": "kafka"}', "unknown KV-event publisher 'kafka'"),
        ('{"enable_kv_cache_events": true, "port": 5557}', "unknown keys ['port']"),
        ('{"buffer_steps": "10"}', "'buffer_steps' has the wrong type"),
        ('{"enable_kv_cache_events": 1}', "'enable_kv_cache_events' has the wrong type"),
        ('{"hwm": true}', "'hwm' has the wrong type"),
        ('{"buffer_steps": 0}', "buffer_steps and max_queue_size must be >= 1"),
        ("[1]", "must be a JSON object"),
        ("{nope", "is not JSON"),
    ],
)
def test_bad_configs_are_refused_with_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        KVEventsConfig.from_json(text)
