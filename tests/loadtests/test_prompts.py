"""loadtests/prompts.py and config.py: sizes, determinism, and settings from the environment."""

from __future__ import annotations

import random

from gateway.tokens import TokenCounter
from loadtests import prompts
from loadtests.config import REQUEST_NAMES, USER_CLASSES, LoadTestConfig


def test_shared_system_prompts_are_long_and_distinct() -> None:
    counter = TokenCounter.for_model("gpt-4o-mini")
    sizes = [counter.count_prompt(p.text) for p in prompts.SYSTEM_PROMPTS]
    assert 3 <= len(sizes) <= 4
    assert all(1000 <= n <= 2000 for n in sizes), sizes
    assert len({p.text for p in prompts.SYSTEM_PROMPTS}) == len(prompts.SYSTEM_PROMPTS)


def test_shared_prompt_requests_share_a_prefix_but_vary_the_user_turn() -> None:
    rng = random.Random(0)
    requests = [prompts.shared_prompt_messages(rng) for _ in range(40)]
    assert {r[0]["content"] for r in requests} == {p.text for p in prompts.SYSTEM_PROMPTS}
    assert len({r[1]["content"] for r in requests}) == 40


def test_cacheable_requests_repeat_and_traffic_is_deterministic() -> None:
    first = [prompts.cacheable_messages(random.Random(7)) for _ in range(3)]
    assert first[0] == first[1] == first[2]
    rng = random.Random(1)
    asked = {prompts.cacheable_messages(rng)[0]["content"] for _ in range(100)}
    assert asked == set(prompts.CACHEABLE_QUESTIONS)
    tiers = {prompts.tiered_messages(rng)[0] for _ in range(100)}
    assert tiers == {"easy", "medium", "hard"}


def test_config_from_env() -> None:
    assert LoadTestConfig.from_env({}) == LoadTestConfig()
    config = LoadTestConfig.from_env(
        {
            "SORTYARD_LOADTEST_KEY": "sk-a",
            "SORTYARD_LOADTEST_LIMITED_KEY": "sk-b",
            "SORTYARD_LOADTEST_MAX_TOKENS": "8",
            "SORTYARD_LOADTEST_SHAPE": "burst",
        }
    )
    assert (config.key, config.limited_key, config.max_tokens, config.shape) == ("sk-a", "sk-b", 8, "burst")
    assert LoadTestConfig.from_env({"SORTYARD_LOADTEST_LIMITED_KEY": ""}).limited_key is None
    assert set(REQUEST_NAMES) == set(USER_CLASSES)
