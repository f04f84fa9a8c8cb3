"""From a decoded request to the engine's inputs: SamplingParams and a prompt that fits the model."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from backends.engine.sampling_params import SamplingParams
from backends.serving.errors import ContextLengthExceeded, InvalidJSON, InvalidRequest, param_from_msgspec
from backends.serving.protocol import ChatCompletionRequest, CompletionRequest

R = TypeVar("R")

MAX_N = 128
"""Most choices one request may ask for."""


def decode_request(body: bytes, request_type: type[R]) -> R:
    """Decode and validate a JSON body; malformed JSON and wrong types become OpenAI 400s."""
    if not body:
        raise InvalidJSON("The request body is empty; expected a JSON object.")
    try:
        return msgspec.json.decode(body, type=request_type)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc), param=param_from_msgspec(str(exc))) from exc
    except msgspec.DecodeError as exc:
        raise InvalidJSON(f"The request body is not valid JSON: {exc}") from exc
    except RecursionError:  # msgspec gives up near depth 1,000: a bad body, not a server fault
        raise InvalidJSON("The request body is nested too deeply.") from None


def sampling_params(
    request: ChatCompletionRequest | CompletionRequest, *, max_tokens: int | None, logprobs: int | None
) -> SamplingParams:
    """The request's sampling fields as SamplingParams, validated (a bad value is a 400 naming it)."""
    if not 1 <= request.n <= MAX_N:
        raise InvalidRequest(f"n must be in [1, {MAX_N}], got {request.n}", param="n")
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    params = SamplingParams(
        n=request.n,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
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
        raise InvalidRequest("top_logprobs requires logprobs to be true", param="top_logprobs")
    logprobs = (request.top_logprobs or 0) if request.logprobs else None
    max_tokens = (
        request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    )
    return sampling_params(request, max_tokens=max_tokens, logprobs=logprobs)


def completion_params(request: CompletionRequest) -> SamplingParams:
    """SamplingParams of a text completion request (16 tokens by default, as OpenAI's completions API)."""
    if request.echo:
        raise InvalidRequest("echo is not supported", param="echo")
    if request.suffix:
        raise InvalidRequest("suffix is not supported", param="suffix")
    if request.best_of is not None and request.best_of != request.n:
        raise InvalidRequest("best_of other than n is not supported", param="best_of")
    max_tokens = 16 if request.max_tokens is None else request.max_tokens
    return sampling_params(request, max_tokens=max_tokens, logprobs=request.logprobs)


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
