"""From a decoded request to the engine's inputs: SamplingParams and a prompt that fits the model."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from backends.engine.sampling_params import SamplingParams
from backends.serving.errors import (
    ContextLengthExceeded,
    InvalidJSON,
    InvalidRequest,
    UnsupportedValue,
    invalid_request_from,
)
from backends.serving.protocol import ChatCompletionRequest, CompletionRequest

R = TypeVar("R")

MAX_N = 128
"""Most choices one request may ask for."""
_MAX_EXACT_INT = 2**53
"""Past this a float no longer spells its integer exactly."""


def _json_number(literal: str) -> float | int:
    """A JSON number written with a fraction or exponent: a whole one (``2.0``) is the integer it equals,
    as JSON Schema counts it (and the gateway, gateway/schemas.py), so an integer field takes it."""
    value = float(literal)
    return int(value) if value.is_integer() and -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT else value


_decoder = msgspec.json.Decoder(float_hook=_json_number)


def decode_request(body: bytes, request_type: type[R]) -> R:
    """Decode and validate a JSON body; malformed JSON and wrong types become OpenAI 400s."""
    if not body:
        raise InvalidJSON("The request body is empty; expected a JSON object.")
    try:
        return msgspec.convert(_decoder.decode(body), request_type)
    except msgspec.ValidationError as exc:
        raise invalid_request_from(exc) from None
    except msgspec.DecodeError as exc:
        raise InvalidJSON(f"The request body is not valid JSON: {exc}") from exc
    except RecursionError:  # msgspec gives up near depth 1,000: a bad body, not a server fault
        raise InvalidJSON("The request body is nested too deeply.") from None


def sampling_params(
    request: ChatCompletionRequest | CompletionRequest, *, max_tokens: int | None, logprobs: int | None
) -> SamplingParams:
    """The request's sampling fields as SamplingParams, validated (a bad value is a 400 naming it)."""
    n = 1 if request.n is None else request.n
    if not 1 <= n <= MAX_N:
        raise InvalidRequest(f"n must be in [1, {MAX_N}], got {n}", param="n")
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    # top_p 0 keeps only the most likely token: greedy, whatever the temperature (OpenAI allows 0)
    is_greedy = request.top_p == 0
    params = SamplingParams(
        n=n,
        temperature=0.0 if is_greedy else 1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None or is_greedy else request.top_p,
        top_k=-1 if request.top_k in (None, 0) else request.top_k,  # vLLM treats 0 as off too
        min_p=request.min_p or 0.0,
        seed=request.seed,
        max_tokens=max_tokens,
        stop=stop,
        stop_token_ids=list(request.stop_token_ids or []),
        ignore_eos=request.ignore_eos,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=1.0 if request.repetition_penalty is None else request.repetition_penalty,
        logprobs=logprobs,
    )
    try:
        params.validate()
    except ValueError as exc:
        message = str(exc)
        raise InvalidRequest(message, param=message.split(" ", 1)[0]) from exc
    return params


def chat_params(request: ChatCompletionRequest) -> SamplingParams:
    """SamplingParams of a chat request (no default length cap, as OpenAI's chat API)."""
    if request.top_logprobs is not None and not request.logprobs:
        raise InvalidRequest(
            "Invalid value for 'top_logprobs': logprobs must be true when top_logprobs is set.",
            param="top_logprobs",
        )
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    max_tokens = (
        request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    )
    return sampling_params(request, max_tokens=max_tokens, logprobs=logprobs)


def completion_params(request: CompletionRequest) -> SamplingParams:
    """SamplingParams of a text completion request (16 tokens by default, as OpenAI's completions API)."""
    if request.echo:
        raise UnsupportedValue("echo is not supported", param="echo")
    if request.suffix:
        raise UnsupportedValue("suffix is not supported", param="suffix")
    if request.best_of is not None and request.best_of != (request.n or 1):
        raise UnsupportedValue("best_of other than n is not supported", param="best_of")
    max_tokens = 16 if request.max_tokens is None else request.max_tokens
    # max_tokens 0 asks for no tokens at all: the handler answers without the engine (asks_for_no_tokens)
    return sampling_params(request, max_tokens=max_tokens or 1, logprobs=request.logprobs)


def asks_for_no_tokens(request: CompletionRequest) -> bool:
    """``max_tokens: 0``: OpenAI's completions answer empty choices (finish_reason "length")."""
    return request.max_tokens == 0


def check_context_length(num_prompt_tokens: int, params: SamplingParams, max_model_len: int) -> None:
    """Refuse a prompt (plus its requested output) longer than the model's context."""
    if num_prompt_tokens == 0:
        raise InvalidRequest("The prompt is empty.", param="prompt")
    if num_prompt_tokens >= max_model_len:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{num_prompt_tokens} input tokens. Please reduce the length of the input.",
            param="messages",
        )
    if params.max_tokens is not None and num_prompt_tokens + params.max_tokens > max_model_len:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{num_prompt_tokens + params.max_tokens} tokens ({num_prompt_tokens} in the input, "
            f"{params.max_tokens} in the completion). Please reduce the length of the input or the "
            "completion.",
            param="max_tokens",
        )
