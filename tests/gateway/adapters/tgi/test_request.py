"""TGI requests: completions as ``/generate_stream``'s parameters, chats as Messages API bodies, and
what TGI cannot do refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.adapters.tgi import TgiAdapter
from gateway.adapters.tgi.request import DEFAULT_COMPLETION_MAX_TOKENS
from gateway.errors import InvalidRequest
from tests.gateway.adapters.tgi.wire import MESSAGES, MODEL, ORIGIN, exchange_for


def _generate(**body: Any) -> dict[str, Any]:
    exchange = exchange_for("/completions", {"prompt": "The sky is", **body})
    sent: dict[str, Any] = json.loads(exchange.body)
    return sent


def _parameters(**body: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = _generate(**body)["parameters"]
    return parameters


def _chat(**body: Any) -> dict[str, Any]:
    sent: dict[str, Any] = json.loads(exchange_for("/chat/completions", {"messages": MESSAGES, **body}).body)
    return sent


# --- /completions: /generate_stream ------------------------------------------------------------------


def test_temperature_zero_is_greedy_without_a_temperature_or_sampler_settings() -> None:
    parameters = _parameters(temperature=0, top_p=0.9, top_k=40, typical_p=0.5)
    assert parameters["do_sample"] is False
    assert not {"temperature", "top_p", "top_k", "typical_p"} & parameters.keys()


def test_any_other_temperature_samples() -> None:
    parameters = _parameters(temperature=0.7, top_p=0.9, top_k=40, typical_p=0.5)
    assert parameters["do_sample"] is True
    assert (parameters["temperature"], parameters["top_p"], parameters["top_k"], parameters["typical_p"]) == (
        0.7,
        0.9,
        40,
        0.5,
    )
    unset = _parameters()  # OpenAI samples at temperature 1 when none is given
    assert unset["do_sample"] is True and "temperature" not in unset


def test_top_p_one_and_disabled_samplers_are_not_sent() -> None:
    parameters = _parameters(temperature=1, top_p=1, top_k=0, typical_p=1.0)
    assert not {"top_p", "top_k", "typical_p"} & parameters.keys()


def test_max_tokens_defaults_to_openais_16() -> None:
    assert _parameters()["max_new_tokens"] == DEFAULT_COMPLETION_MAX_TOKENS == 16


def test_stop_seed_and_penalties_are_mapped() -> None:
    parameters = _parameters(
        stop="\n\n", seed=7, frequency_penalty=0.5, repetition_penalty=1.1, presence_penalty=0
    )
    assert parameters["stop"] == ["\n\n"]
    assert (parameters["seed"], parameters["frequency_penalty"], parameters["repetition_penalty"]) == (
        7,
        0.5,
        1.1,
    )
    assert "presence_penalty" not in parameters
    assert _parameters(stop=["a", "b"])["stop"] == ["a", "b"]
    assert "stop" not in _parameters(stop=[])


def test_the_served_model_is_the_adapter_id_unless_it_is_tgi() -> None:
    sent = TgiAdapter().exchange("/completions", {"model": "tgi", "prompt": "x"}, ORIGIN, stream=False)
    assert sent is not None and "adapter_id" not in json.loads(sent.body)["parameters"]


def test_fields_without_effect_are_dropped_and_a_one_prompt_list_is_its_prompt() -> None:
    sent = _generate(
        prompt=["The sky is"],
        user="u1",
        metadata={"a": "b"},
        stream=True,
        stream_options={"include_usage": True},
        priority=3,
        n=1,
        best_of=1,
        echo=False,
        logprobs=None,
        suffix=None,
    )
    assert sent["inputs"] == "The sky is"
    assert set(sent["parameters"]) == {
        "max_new_tokens",
        "details",
        "return_full_text",
        "do_sample",
        "adapter_id",
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": [[1, 2]]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": None}, "prompt"),
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"logprobs": 0}, "logprobs"),
        ({"echo": True}, "echo"),
        ({"suffix": " end."}, "suffix"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": 5}, "stop"),
        ({"min_tokens": 4}, "min_tokens"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
    ],
)
def test_what_generate_cannot_do_is_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        TgiAdapter().exchange("/completions", {"model": MODEL, "prompt": "x", **body}, ORIGIN, stream=False)
    assert caught.value.param == param
    assert caught.value.status == 400


# --- /chat/completions: the Messages API ------------------------------------------------------------


def test_a_chat_body_gets_what_tgi_needs() -> None:
    sent = _chat(
        stop="\n",
        top_p=1,
        max_completion_tokens=32,
        priority=2,
        cache_salt="s",
        n=1,
        tool_choice=None,
        logprobs=True,
        top_logprobs=2,
        presence_penalty=0.5,
    )
    assert sent == {
        "model": MODEL,
        "messages": MESSAGES,
        "stop": ["\n"],
        "max_tokens": 32,
        "logprobs": True,
        "top_logprobs": 2,
        "presence_penalty": 0.5,
    }
    assert "top_p" not in _chat(temperature=0, top_p=0.5)  # greedy: TGI would sample with top_p
    assert _chat(temperature=0.5, top_p=0.5)["top_p"] == 0.5
    assert _chat(max_tokens=8, max_completion_tokens=32)["max_tokens"] == 8


@pytest.mark.parametrize(
    ("body", "param"), [({"n": 3}, "n"), ({"logit_bias": {"1": 5}}, "logit_bias"), ({"stop": [1]}, "stop")]
)
def test_what_the_messages_api_ignores_is_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _chat(**body)
    assert caught.value.param == param
