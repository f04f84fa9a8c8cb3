"""The shared API: input views, conversation keys, header-safe reasons, config decoding."""

from __future__ import annotations

import msgspec
import pytest
import yaml

from gateway.tiers import (
    ClassifierConfig,
    ClassifierLoadError,
    ClassifyInput,
    ExamplesConfig,
    LearnedConfig,
    RulesConfig,
    build_classifier,
    conversation_key,
)
from gateway.tiers.classifier import PromptView, header_safe


def test_prompt_view_reads_last_user_message_and_parts() -> None:
    messages: list[dict] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "second"}, {"type": "image_url", "image_url": {}}],
        },
    ]
    view = PromptView.of(ClassifyInput(messages=messages))
    assert view.text == "second"
    assert view.num_turns == 2
    assert view.num_prompt_tokens == (len("be brief") + len("first") + len("ok") + len("second") + 3) // 4


def test_prompt_view_completions_and_counted_tokens() -> None:
    view = PromptView.of(ClassifyInput(messages=[], prompt="hello", num_prompt_tokens=99))
    assert (view.text, view.num_prompt_tokens, view.num_turns) == ("hello", 99, 1)


@pytest.mark.parametrize(
    "messages",
    [[], [None, 3, "x"], [{"role": "user"}], [{"role": "user", "content": None}], [{"content": 5}]],
)
def test_prompt_view_tolerates_malformed_messages(messages: list) -> None:
    view = PromptView.of(ClassifyInput(messages=messages))
    assert view.text == ""


def test_conversation_key_is_stable_across_turns() -> None:
    turn1 = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"}]
    turn2 = [*turn1, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    assert conversation_key(turn1) == conversation_key(turn2)
    assert conversation_key(turn1) != conversation_key([{"role": "user", "content": "Q1"}])
    assert conversation_key(turn1, namespace="tenant-a") != conversation_key(turn1, namespace="tenant-b")
    assert conversation_key([{"role": "system", "content": "S"}]) is None
    assert conversation_key([]) is None
    # Length-prefixed fields: moving text between system and user changes the key.
    assert conversation_key([{"role": "system", "content": "ab"}, {"role": "user", "content": "c"}]) != (
        conversation_key([{"role": "system", "content": "a"}, {"role": "user", "content": "bc"}])
    )


def test_header_safe() -> None:
    assert header_safe("ok p(large)=0.81") == "ok p(large)=0.81"
    assert header_safe("a\r\nb\u00e9") == "a?b?"
    assert len(header_safe("x" * 1000)) == 120


def test_policy_yaml_decodes_into_the_tagged_union() -> None:
    doc = yaml.safe_load(
        """
        - {kind: learned, cost_quality: 0.7}
        - {kind: rules, rules: [{pool: large, min_prompt_tokens: 2000}], fallback_pool: small}
        - {kind: examples, examples: {small: [hi], large: [prove it]}, sticky_conversations: false}
        """
    )
    configs = msgspec.convert(doc, list[ClassifierConfig])
    assert isinstance(configs[0], LearnedConfig) and configs[0].cost_quality == 0.7
    assert isinstance(configs[1], RulesConfig) and configs[1].rules[0].min_prompt_tokens == 2000
    assert isinstance(configs[2], ExamplesConfig) and not configs[2].sticky_conversations
    assert configs[0].sticky_conversations


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "nope"},
        {"kind": "learned", "cost_quality": 2},
        {"kind": "learned", "typo": 1},
        {"kind": "examples"},
    ],
)
def test_invalid_policy_is_refused(bad: dict) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(bad, ClassifierConfig)


def test_tiers_must_be_pools() -> None:
    with pytest.raises(ClassifierLoadError, match=r"pools that do not exist.*'large'"):
        build_classifier(LearnedConfig(), pools=["small", "medium"])
    with pytest.raises(ClassifierLoadError, match="tier_pools names tiers"):
        build_classifier(LearnedConfig(tier_pools={"huge": "x"}), pools=None)
    mapped = build_classifier(
        LearnedConfig(tier_pools={"large": "gpu-70b"}), pools=["small", "medium", "gpu-70b"]
    )
    decision = mapped.classify(
        ClassifyInput(messages=[{"role": "user", "content": "Prove Fermat's little theorem."}])
    )
    assert decision.pool == "gpu-70b"
    assert decision.probabilities is not None and "gpu-70b" in decision.probabilities
