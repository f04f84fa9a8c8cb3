"""Triton requests: an OpenAI chat or text completion as the TensorRT-LLM ensemble's inputs.

The generate request's JSON names the ensemble's inputs:

- ``text_input``: ``/completions``' ``prompt`` as it is; ``/chat/completions``' messages rendered in
  the replica's ``chat_template`` (``gateway.adapters.prompts``: the API takes text only);
- ``max_tokens`` (``max_completion_tokens`` or ``max_tokens``; for ``/completions`` 16 when absent,
  OpenAI's default; a chat request without one is sent without one, and the ensemble, which requires
  it, answers 400), ``stop_words`` (``stop``), ``seed``, ``presence_penalty``, ``frequency_penalty``
  and the vLLM-style ``repetition_penalty``, ``min_tokens``;
- sampling: TensorRT-LLM samples greedily unless told otherwise (``top_k`` 1), OpenAI at temperature
  1, so ``temperature: 0`` becomes ``top_k: 1`` (greedy; the temperature is not sent) and any other
  request samples: ``temperature`` and ``top_p`` as given, ``top_k`` as given or 0 (every token);
- always ``stream``, ``exclude_input_in_output: true`` (``text_output`` is the completion alone),
  ``return_num_input_tokens`` and ``return_num_output_tokens`` (the counts usage is read from).

Refused (``InvalidRequest``, naming the parameter), as the ensemble cannot honour them: ``n`` or
``best_of`` above 1, ``logprobs``/``top_logprobs``, ``tools``/``functions``/``tool_choice``,
``response_format`` other than text, ``logit_bias``, ``echo``, ``suffix``, a ``prompt`` that is not
one string, message content other than text, any other parameter it does not know, a negative
``seed`` or a ``max_tokens`` over 2**31 - 1 (the ensemble's UINT64 and INT32 inputs: Triton would
answer 500 or wrap the number). Fields with no effect on the output (``user``, ``metadata``,
``stream_options``, the gateway's ``priority``, ...) are dropped.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.base import NO_EFFECT_FIELDS
from gateway.adapters.prompts import render_chat
from gateway.adapters.stop import stop_strings
from gateway.errors import InvalidRequest

__all__ = ["DEFAULT_COMPLETION_MAX_TOKENS", "chat_text", "completion_text", "ensemble_inputs"]

DEFAULT_COMPLETION_MAX_TOKENS = 16
"""OpenAI's documented default for ``/completions``."""

_PASSED = {  # OpenAI (and vLLM-style) sampling parameters with the ensemble input of the same name
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
}
_HANDLED = {"model", "max_tokens", "stop", "stream", "temperature", "top_p", "top_k", *_PASSED}
_CHAT_HANDLED = {*_HANDLED, "messages", "max_completion_tokens"}
_COMPLETION_HANDLED = {*_HANDLED, "prompt"}
_NO_EFFECT = NO_EFFECT_FIELDS  # dropped: they do not change the output


def _is_neutral(name: str, value: Any) -> bool:
    """Whether a parameter the ensemble cannot honour is set to what asks for nothing."""
    if value is None:
        return True
    if name in ("n", "best_of"):
        return value == 1 and not isinstance(value, bool)
    if name in ("logprobs", "echo"):
        return value is False
    if name in ("tools", "functions", "logit_bias", "suffix"):
        return not value
    if name == "tool_choice":
        return value == "none"
    if name == "response_format":
        return isinstance(value, dict) and value.get("type") == "text"
    if name == "modalities":
        return value == ["text"]
    return False


def _check_params(body: dict[str, Any], handled: set[str]) -> None:
    for name, value in body.items():
        if name in handled or name in _NO_EFFECT or _is_neutral(name, value):
            continue
        raise InvalidRequest(
            f"`{name}` is not supported by this model's server (Triton's generate API).", param=name
        )


def _check_text_only(messages: Any) -> None:
    """Content parts other than text (images, audio) would be dropped by the text prompt: refused."""
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            not isinstance(part, dict) or part.get("type") != "text" for part in content
        ):
            raise InvalidRequest(
                "This model's server (Triton's generate API) takes text content only.",
                param=f"messages[{index}].content",
            )


_INT32_MAX = 2**31 - 1


def _max_tokens(body: dict[str, Any], default: int | None) -> int | None:
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _INT32_MAX:
        raise InvalidRequest(f"`{name}` must be an integer from 1 to {_INT32_MAX}.", param=name)
    return value


def _check_seed(body: dict[str, Any]) -> None:
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise InvalidRequest("`seed` must be a non-negative integer for this model's server.", param="seed")


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The ensemble's sampling inputs for OpenAI's (see the module's docstring)."""
    out: dict[str, Any] = {name: body[name] for name in _PASSED if body.get(name) is not None}
    temperature = body.get("temperature")
    if temperature == 0:
        out["top_k"] = 1
        return out
    if temperature is not None:
        out["temperature"] = temperature
    if body.get("top_p") is not None:
        out["top_p"] = body["top_p"]
    top_k = body.get("top_k")
    out["top_k"] = top_k if isinstance(top_k, int) and top_k > 0 else 0
    return out


def chat_text(body: dict[str, Any], chat_template: str) -> str:
    """A chat request, checked, as its messages rendered in ``chat_template``."""
    _check_params(body, _CHAT_HANDLED)
    _check_text_only(body.get("messages"))
    return render_chat(body.get("messages"), chat_template)


def completion_text(body: dict[str, Any]) -> str:
    """A completion request, checked, as its prompt."""
    _check_params(body, _COMPLETION_HANDLED)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise InvalidRequest(
            "This model's server (Triton's generate API) takes one text prompt.", param="prompt"
        )
    return prompt


def ensemble_inputs(
    body: dict[str, Any], text: str, *, default_max_tokens: int | None, stream: bool
) -> tuple[dict[str, Any], int | None, tuple[str, ...]]:
    """The generate request's JSON for ``text`` and the request's parameters, with the ``max_tokens``
    and the stop strings it sends (the answer is read against both)."""
    stops = stop_strings(body.get("stop"))
    if stops is None:
        raise InvalidRequest("`stop` must be a string or a list of strings.", param="stop")
    _check_seed(body)
    max_tokens = _max_tokens(body, default_max_tokens)
    native: dict[str, Any] = {"text_input": text}
    if max_tokens is not None:
        native["max_tokens"] = max_tokens
    native |= {
        **_sampling(body),
        "stream": stream,
        "exclude_input_in_output": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    if stops:
        native["stop_words"] = list(stops)
    return native, max_tokens, stops
