"""llama.cpp requests: an OpenAI completion as the native ``/completion`` body with llama.cpp's names,
and what the OpenAI answer cannot carry refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest
from tests.gateway.adapters.llamacpp.wire import MODEL, ORIGIN, completion_for, sent_body


def test_a_completion_goes_to_the_native_route_with_llama_cpp_names() -> None:
    exchange = completion_for(
        max_tokens=16,
        temperature=0,
        top_p=0.9,
        seed=7,
        stop="\n",
        presence_penalty=0.5,
        frequency_penalty=0.25,
        logit_bias={"15043": -100},
        top_k=20,
        stream_options={"include_usage": True},
        user="u-1",
        n=1,
        echo=False,
        logprobs=None,
    )
    assert exchange.url == ORIGIN + "/completion" and not exchange.stream
    assert sent_body(exchange) == {
        "model": MODEL,
        "prompt": "The three primary colours are",
        "n_predict": 16,
        "temperature": 0,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["\n"],
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "logit_bias": {"15043": -100},
        "top_k": 20,
        "stream": False,
        "cache_prompt": True,
    }


def test_a_stream_asks_for_one_and_an_absent_length_is_openais_default() -> None:
    sent = sent_body(completion_for(stream=True, stop=["a", "b"], cache_prompt=False))
    assert sent["stream"] is True and sent["stop"] == ["a", "b"] and sent["cache_prompt"] is False
    assert sent["n_predict"] == 16 and "temperature" not in sent


@pytest.mark.parametrize(
    ("prompt", "sent"),
    [("x", "x"), (["x"], "x"), ([1, 2, 3], [1, 2, 3]), ([[1, 2, 3]], [1, 2, 3])],
)
def test_one_prompt_as_text_or_token_ids(prompt: Any, sent: Any) -> None:
    assert sent_body(completion_for(prompt=prompt))["prompt"] == sent


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("best_of", 3),
        ("logprobs", 0),
        ("logprobs", 2),
        ("echo", True),
        ("suffix", "def f():"),
        ("prompt", ["one", "two"]),
        ("prompt", []),
        ("prompt", None),
        ("prompt", [1, "a"]),
        ("n_probs", 5),
        ("n_cmpl", 2),
    ],
)
def test_what_the_answer_cannot_carry_is_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        completion_for(**{field: value})
    assert caught.value.status == 400 and caught.value.param == field
