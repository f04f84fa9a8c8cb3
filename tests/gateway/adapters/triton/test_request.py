"""Triton requests: the OpenAI request as the TensorRT-LLM ensemble's inputs (length, sampling, stop
words, penalties), and what the ensemble cannot do refused naming the parameter."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest
from tests.gateway.adapters.triton.wire import ALWAYS, MESSAGES, chat_for, exchange_for, sent_body


def test_a_completion_takes_the_prompt_as_it_is_and_openais_default_of_16_tokens() -> None:
    sent = sent_body(
        exchange_for("/completions", {"prompt": "The three primary colours are", "temperature": 0})
    )
    assert sent["text_input"] == "The three primary colours are" and sent["max_tokens"] == 16


def test_a_chat_without_max_tokens_is_sent_without_it_and_max_completion_tokens_wins() -> None:
    assert "max_tokens" not in sent_body(chat_for())
    assert sent_body(chat_for(max_tokens=8, max_completion_tokens=12))["max_tokens"] == 12


def test_temperature_zero_is_greedy_and_any_other_samples() -> None:
    greedy = sent_body(chat_for(max_tokens=8, temperature=0, top_p=0.5))
    assert greedy["top_k"] == 1 and "temperature" not in greedy and "top_p" not in greedy
    sampled = sent_body(chat_for(max_tokens=8, temperature=0.7, top_p=0.9))
    assert (sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (0.7, 0.9, 0)
    default = sent_body(chat_for(max_tokens=8))
    assert default["top_k"] == 0 and "temperature" not in default  # OpenAI samples at temperature 1
    assert sent_body(chat_for(max_tokens=8, temperature=1, top_k=40))["top_k"] == 40


def test_stop_seed_and_penalties_are_the_ensembles_inputs() -> None:
    sent = sent_body(
        chat_for(
            max_tokens=8,
            stop=[" is", ""],
            seed=7,
            presence_penalty=0.5,
            frequency_penalty=0.25,
            repetition_penalty=1.1,
            min_tokens=2,
        )
    )
    assert sent["stop_words"] == [" is"] and sent["seed"] == 7
    assert (sent["presence_penalty"], sent["frequency_penalty"]) == (0.5, 0.25)
    assert (sent["repetition_penalty"], sent["min_tokens"]) == (1.1, 2)
    assert sent_body(chat_for(max_tokens=8, stop="\n"))["stop_words"] == ["\n"]
    assert "stop_words" not in sent_body(chat_for(max_tokens=8, stop=[]))


def test_fields_without_effect_and_neutral_values_pass() -> None:
    sent = sent_body(
        chat_for(
            max_tokens=8,
            user="u-1",
            metadata={"a": "b"},
            priority=3,
            stream_options={"include_usage": True},
            n=1,
            logprobs=False,
            tools=[],
            tool_choice="none",
            response_format={"type": "text"},
            modalities=["text"],
            cache_salt="s",
        )
    )
    assert set(sent) == {"text_input", "max_tokens", "top_k", "stream", *ALWAYS}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"reasoning_effort": "high"}, "reasoning_effort"),
        ({"seed": -1}, "seed"),
        ({"max_tokens": 2**31}, "max_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"stop": 5}, "stop"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content",
        ),
        ({"messages": []}, "messages"),
    ],
)
def test_what_the_ensemble_cannot_do_in_a_chat_is_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        exchange_for("/chat/completions", {"messages": MESSAGES, "max_tokens": 8, **body})
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": "a", "echo": True}, "echo"),
        ({"prompt": "a", "suffix": "b"}, "suffix"),
        ({"prompt": "a", "best_of": 2}, "best_of"),
        ({"prompt": "a", "logprobs": 0}, "logprobs"),
        ({"prompt": "a", "messages": MESSAGES}, "messages"),
    ],
)
def test_what_the_ensemble_cannot_do_in_a_completion_is_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        exchange_for("/completions", body)
    assert caught.value.param == param
