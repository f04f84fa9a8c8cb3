"""From a decoded request to the engine's inputs: SamplingParams and a prompt that fits the model."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

import msgspec

from backends.engine.sampling_params import SamplingParams
from backends.engine.structured_output.errors import GrammarError
from backends.engine.structured_output.spec import StructuredOutput
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
        logit_bias=_logit_bias(request.logit_bias),
    )
    try:
        params.validate()
    except ValueError as exc:
        message = str(exc)
        raise InvalidRequest(message, param=message.split(" ", 1)[0]) from exc
    return params


def _logit_bias(given: dict[str, float] | None) -> dict[int, float]:
    """OpenAI's ``logit_bias`` (token ids as JSON's string keys) with integer ids; a key that is not
    a token id is a 400 naming the field. Only ASCII digits spell one: ``str.isdigit`` also takes "²"
    (which ``int`` refuses) and Arabic-Indic or fullwidth digits (which ``int`` reads as some other id)."""
    bias: dict[int, float] = {}
    for key, value in (given or {}).items():
        token_id = _token_id(key)
        if token_id is None:
            raise InvalidRequest(f"logit_bias: {key!r} is not a token id", param="logit_bias")
        bias[token_id] = float(value)
    return bias


def _token_id(key: str) -> int | None:
    """The token id a ``logit_bias`` key spells in ASCII decimal digits; None for anything else (or one
    too long for ``int`` to read: it would be outside any vocabulary anyway)."""
    if not (key.isascii() and key.isdigit()):
        return None
    try:
        return int(key)
    except ValueError:  # past Python's int-from-string digit limit
        return None


def check_logit_bias(params: SamplingParams, vocab_size: int) -> None:
    """Refuse a biased token id the model does not have."""
    outside = [t for t in params.logit_bias if t >= vocab_size]
    if outside:
        raise InvalidRequest(
            f"logit_bias: token id {outside[0]} is outside the model's vocabulary of {vocab_size}",
            param="logit_bias",
        )


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
    params = sampling_params(request, max_tokens=max_tokens, logprobs=logprobs)
    params.structured = structured_output(request)
    return params


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
    params = sampling_params(request, max_tokens=max_tokens or 1, logprobs=request.logprobs)
    params.structured = structured_output(request)
    return params


def asks_for_no_tokens(request: CompletionRequest) -> bool:
    """``max_tokens: 0``: OpenAI's completions answer empty choices (finish_reason "length")."""
    return request.max_tokens == 0


def check_context_length(
    num_prompt_tokens: int, params: SamplingParams, max_model_len: int, prompt_param: str = "messages"
) -> None:
    """Refuse a prompt (plus its requested output) longer than the model's context; the 400 names
    ``prompt_param``, the field the prompt came in."""
    if num_prompt_tokens == 0:
        raise InvalidRequest("The prompt is empty.", param=prompt_param)
    if num_prompt_tokens >= max_model_len:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{num_prompt_tokens} input tokens. Please reduce the length of the input.",
            param=prompt_param,
        )
    if params.max_tokens is not None and num_prompt_tokens + params.max_tokens > max_model_len:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{num_prompt_tokens + params.max_tokens} tokens ({num_prompt_tokens} in the input, "
            f"{params.max_tokens} in the completion). Please reduce the length of the input or the "
            "completion.",
            param="max_tokens",
        )


# -- structured outputs ------------------------------------------------------------------------------
GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
"""vLLM's older structured-output fields, one constraint each."""
_STRUCTURED_KEYS = {
    "json": "json_schema",
    "regex": "regex",
    "choice": "choice",
    "grammar": "grammar",
    "json_object": "json_object",
    "structural_tag": "structural_tag",
}
"""vLLM's ``structured_outputs`` keys -> the ``StructuredOutput`` field each sets."""
_STRUCTURED_OPTIONS = frozenset(
    {"disable_fallback", "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern"}
)
"""vLLM's backend options beside the constraint: accepted and left to this engine's defaults."""


def structured_param(request: ChatCompletionRequest | CompletionRequest) -> str | None:
    """The request field that asks for a structured output (``response_format``, ``structured_outputs``
    or a ``guided_*`` field); None for free text. A 400 when two of them do."""
    given = [name for name in ("structured_outputs", *GUIDED_FIELDS) if getattr(request, name) is not None]
    if not _is_text_format(request.response_format):
        given.insert(0, "response_format")
    if len(given) > 1:
        raise InvalidRequest(
            f"Only one structured-output constraint may be given; got {', '.join(given)}.", param=given[1]
        )
    return given[0] if given else None


def structured_output(request: ChatCompletionRequest | CompletionRequest) -> StructuredOutput | None:
    """What the request's output must match, read from whichever field asks for it (a 400 naming the
    field when its shape is wrong; whether a schema or regex compiles is ``compile_structured``'s)."""
    param = structured_param(request)
    if param is None:
        return None
    value = getattr(request, param)
    if param == "response_format":
        return _response_format(value)
    if param == "structured_outputs":
        if not isinstance(value, dict):
            raise InvalidRequest("structured_outputs must be an object", param=param)
        unknown = set(value) - set(_STRUCTURED_KEYS) - _STRUCTURED_OPTIONS
        if unknown:
            raise InvalidRequest(f"structured_outputs has unknown keys: {sorted(unknown)}", param=param)
        given = [key for key in _STRUCTURED_KEYS if value.get(key) not in (None, False)]
        if len(given) != 1:
            raise InvalidRequest(
                f"structured_outputs sets exactly one of {', '.join(_STRUCTURED_KEYS)}; got "
                f"{', '.join(given) or 'none'}",
                param=param,
            )
        return _constraint(_STRUCTURED_KEYS[given[0]], value[given[0]], f"structured_outputs.{given[0]}")
    kind = {"guided_json": "json_schema", "guided_choice": "choice"}.get(param, param.removeprefix("guided_"))
    return _constraint(kind, value, param)


def _response_format(value: Any) -> StructuredOutput:
    param = "response_format"
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_object":
        return StructuredOutput(json_object=True)
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise InvalidRequest(
                "response_format.json_schema must be an object with a 'schema' (and a 'name')",
                param="response_format.json_schema",
            )
        return _constraint("json_schema", spec["schema"], "response_format.json_schema.schema")
    if not isinstance(value, dict):
        raise InvalidRequest(
            'Invalid value for \'response_format\': expected an object such as {"type": "json_object"}.',
            param=param,
        )
    raise InvalidRequest(
        "Invalid value for 'response_format': its 'type' must be one of 'text', 'json_object', "
        f"'json_schema'; got {kind!r}.",
        param=param,
    )


def _constraint(kind: str, value: Any, param: str) -> StructuredOutput:
    """One constraint of ``kind`` (a ``StructuredOutput`` field) from a request's value."""
    if kind == "json_schema":
        if isinstance(value, str):  # vLLM takes the schema as JSON text too
            try:
                value = json.loads(value)
            except ValueError:
                raise InvalidRequest(f"{param} is not valid JSON", param=param) from None
        if not isinstance(value, dict | bool):
            raise InvalidRequest(f"{param} must be a JSON Schema (an object)", param=param)
        return StructuredOutput(json_schema=json.dumps(value, ensure_ascii=False))
    if kind == "json_object":
        return StructuredOutput(json_object=True)
    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
            raise InvalidRequest(f"{param} must be a non-empty list of non-empty strings", param=param)
        return StructuredOutput(choice=tuple(value))
    if kind == "structural_tag" and isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{param} must be a non-empty string", param=param)
    if kind == "regex":
        return StructuredOutput(regex=value)
    if kind == "grammar":
        return StructuredOutput(grammar=value)
    return StructuredOutput(structural_tag=value)


def _is_text_format(response_format: Any) -> bool:
    """No ``response_format``, or ``{"type": "text"}``: free text."""
    return response_format is None or (
        isinstance(response_format, dict) and response_format.get("type") == "text"
    )


async def compile_structured(
    engine: Any, request: ChatCompletionRequest | CompletionRequest, params: SamplingParams
) -> None:
    """Compile the request's constraint in a worker thread (never on the event loop), so the engine's
    step loop finds it cached; an invalid schema, regex or grammar is a 400 naming the field. An engine
    without grammar support (a test twin) is left to refuse it itself."""
    compiler = getattr(engine.engine, "grammar_compiler", None)
    if params.structured is None or compiler is None:
        return
    try:
        await asyncio.to_thread(compiler.compile, params.structured)
    except GrammarError as exc:
        param = structured_param(request) or "tools"  # no field asked for it: a forced tool call did
        raise InvalidRequest(f"Invalid '{param}': {exc}", param=param) from None
