"""Request bodies to sampling parameters: what is refused (400 with the field as ``param``), what
nulls and edge values mean, and the context-length check."""

from __future__ import annotations

import openai
import pytest

from tests.backends.serving.fake_engine import MODEL, FakeAsyncEngine
from tests.backends.serving.harness import assert_error, chat, post


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, None),  # missing messages
        ({"model": MODEL, "messages": "hi"}, "messages"),
        ({"model": MODEL, "messages": [{"content": "hi"}]}, None),
        ({"model": MODEL, "messages": [{"role": 3, "content": "hi"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": []}, "messages"),
        (chat(temperature="hot"), "temperature"),
        (chat(temperature=-1), "temperature"),
        (chat(top_p=1.5), "top_p"),
        (chat(n=0), "n"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(top_logprobs=2), "top_logprobs"),
        (chat(logprobs=True, top_logprobs=99), "top_logprobs"),
        (chat(stop=[""]), "stop[0]"),
        (chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
        ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "messages[0].content"),
        ({"model": MODEL, "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
    ],
)  # fmt: skip
def test_bad_chat_requests_are_400(base_url: str, body: dict[str, object], param: str | None) -> None:
    assert_error(post(base_url, "/v1/chat/completions", body), 400, param=param)


@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL},
        {"model": MODEL, "prompt": ["a", "b"]},
        {"model": MODEL, "prompt": [1, "b"]},
        {"model": MODEL, "prompt": [999]},
        {"model": MODEL, "prompt": "x", "echo": True},
        {"model": MODEL, "prompt": "x", "logprobs": "yes"},
    ],
)
def test_bad_completion_requests_are_400(base_url: str, body: dict[str, object]) -> None:
    assert_error(post(base_url, "/v1/completions", body), 400)


def test_top_p_zero_is_greedy(base_url: str, fake: FakeAsyncEngine) -> None:
    response = post(base_url, "/v1/chat/completions", chat(top_p=0, temperature=0.8))
    assert response.status_code == 200, response.text
    params = fake.calls[-1]["params"]
    assert (params.temperature, params.top_p, params.is_greedy) == (0.0, 1.0, True)


def test_nulls_mean_the_defaults(base_url: str, fake: FakeAsyncEngine) -> None:
    nulls = dict.fromkeys(["stream", "n", "temperature", "top_p", "max_tokens", "logprobs", "seed", "stop"])
    response = post(base_url, "/v1/chat/completions", chat(**nulls, top_logprobs=None, stream_options=None))
    assert response.status_code == 200, response.text
    params = fake.calls[-1]["params"]
    assert (params.n, params.temperature, params.top_p, params.max_tokens) == (1, 1.0, 1.0, None)
    response = post(base_url, "/v1/completions", {"model": MODEL, "prompt": "x", **nulls, "echo": None})
    assert response.status_code == 200, response.text
    assert fake.calls[-1]["params"].max_tokens == 16


def test_too_long_prompt_is_context_length_exceeded(client: openai.OpenAI, base_url: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 600}])
    assert info.value.code == "context_length_exceeded"
    body = {"model": MODEL, "prompt": "x" * 10, "max_tokens": 600}
    assert_error(post(base_url, "/v1/completions", body), 400, "context_length_exceeded", "max_tokens")
    assert info.value.param == "messages"
    long_prompt = {"model": MODEL, "prompt": "x" * 600, "max_tokens": 1}  # a completion has no messages
    assert_error(post(base_url, "/v1/completions", long_prompt), 400, "context_length_exceeded", "prompt")


def test_logit_bias_becomes_token_ids_and_a_bad_one_is_named() -> None:
    import msgspec

    from backends.serving.errors import InvalidRequest
    from backends.serving.params import chat_params, check_logit_bias
    from backends.serving.protocol import ChatCompletionRequest as Chat

    request = msgspec.convert(
        {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": -100}}, Chat
    )
    params = chat_params(request)
    assert params.logit_bias == {5: -100.0} and params.has_penalties
    check_logit_bias(params, vocab_size=6)
    with pytest.raises(InvalidRequest) as outside:
        check_logit_bias(params, vocab_size=5)
    assert outside.value.param == "logit_bias"
    with pytest.raises(InvalidRequest) as not_an_id:
        chat_params(
            msgspec.convert({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}}, Chat)
        )
    assert not_an_id.value.param == "logit_bias"


def test_logit_bias_out_of_the_vocabulary_is_a_400_naming_it(base_url: str) -> None:
    assert (
        post(base_url, "/v1/chat/completions", chat(max_tokens=4, logit_bias={"5": -100})).status_code == 200
    )
    refused = post(base_url, "/v1/chat/completions", chat(logit_bias={"999": 5}))
    assert_error(refused, 400, param="logit_bias")


@pytest.mark.parametrize("key", ["\u00b2", "\u0661\u0662", "\uff11\uff12", "1" * 5000, "+5", " 5"])
def test_a_logit_bias_key_not_in_ascii_digits_is_a_400_naming_it(base_url: str, key: str) -> None:
    # superscript two passes str.isdigit but not int() (once a 500); int() reads Arabic-Indic and
    # fullwidth 12 as token 12; a digit string past int()'s limit is no token id either
    refused = post(base_url, "/v1/chat/completions", chat(max_tokens=4, logit_bias={key: 5}))
    assert_error(refused, 400, param="logit_bias")


def test_a_huge_top_k_is_no_filter_and_a_negative_one_is_named(base_url: str, fake: FakeAsyncEngine) -> None:
    response = post(base_url, "/v1/chat/completions", chat(max_tokens=4, top_k=18446744073709551616))
    assert response.status_code == 200, response.text
    assert fake.calls[-1]["params"].top_k == 2**64  # the sampler clamps it to the vocabulary: no filter
    assert_error(post(base_url, "/v1/chat/completions", chat(top_k=-2)), 400, param="top_k")


def test_a_tiny_temperature_is_greedy_and_a_non_finite_penalty_is_named(
    base_url: str, fake: FakeAsyncEngine
) -> None:
    response = post(base_url, "/v1/chat/completions", chat(max_tokens=4, temperature=1e-39))
    assert response.status_code == 200, response.text
    assert fake.calls[-1]["params"].is_greedy
    tiny = post(base_url, "/v1/chat/completions", chat(max_tokens=4, repetition_penalty=1e-40))
    assert tiny.status_code == 200, tiny.text
    for value in ("1e999", "0", "-1"):
        body = f'{{"messages": [{{"role": "user", "content": "hi"}}], "repetition_penalty": {value}}}'
        assert_error(post(base_url, "/v1/chat/completions", body), 400, param="repetition_penalty")
