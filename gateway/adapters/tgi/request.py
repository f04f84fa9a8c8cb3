"""TGI requests: an OpenAI completion as ``/generate_stream``'s body, a chat as the Messages API's.

``/completions``: the body is ``{"inputs": prompt, "parameters": {...}}``:

- ``max_tokens`` -> ``max_new_tokens`` (16 when absent, OpenAI's default for completions);
- ``temperature``: 0 is greedy, ``do_sample: false`` with no temperature (TGI refuses 0), and any
  sampler setting is then left out (TGI samples whenever ``top_p``/``top_k``/``typical_p`` is set);
  otherwise ``do_sample: true`` (OpenAI samples at temperature 1 by default) with the temperature given;
- ``top_p`` below 1 (TGI refuses 1, which is no filtering), ``stop`` (a string or a list),
  ``seed``, ``frequency_penalty``; TGI's own ``top_k``, ``repetition_penalty`` and ``typical_p``;
- ``adapter_id`` is the served model unless it is ``tgi`` (as TGI's own OpenAI routes do: a LoRA
  adapter's name selects it, an unknown name the base model);
- always ``details: true`` (finish reason and counts) and ``return_full_text: false``.

Refused (``InvalidRequest`` naming the parameter): a ``prompt`` that is not one text (several prompts,
token ids, empty), ``n`` or ``best_of`` above 1, ``logprobs``, ``echo``, ``suffix``, ``logit_bias``,
a non-zero ``presence_penalty`` (``/generate`` has none), ``max_tokens`` 0, any parameter it does not
know; ``user``, ``metadata``, ``stream_options`` and the gateway's ``priority``/``cache_salt`` have no
effect on the text and are dropped.

``/chat/completions``: the body passes with the changes TGI needs: ``stop`` as a list, ``top_p`` 1
left out, ``top_p`` left out at temperature 0 (TGI would sample), ``max_completion_tokens`` as
``max_tokens``, nulls and the gateway's ``priority``/``cache_salt`` left out; ``n`` above 1 and
``logit_bias`` are refused (TGI ignores them).

Both give their stop strings too: TGI keeps a stop string in its answer, which
``gateway.adapters.tgi.answer`` cuts.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.stop import stop_strings
from gateway.errors import InvalidRequest

__all__ = ["DEFAULT_COMPLETION_MAX_TOKENS", "chat_body", "generate_inputs", "generate_parameters"]

DEFAULT_COMPLETION_MAX_TOKENS = 16
"""OpenAI's ``max_tokens`` for ``/completions`` that set none (TGI would fill its context)."""

_NO_EFFECT = frozenset(
    {"model", "prompt", "stream", "stream_options", "user", "metadata", "priority", "cache_salt", "store"}
)
"""Completion fields that change nothing in the text: not sent."""
_MAPPED = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "top_k",
        "repetition_penalty",
        "typical_p",
        "n",
        "best_of",
        "logprobs",
        "echo",
        "suffix",
        "logit_bias",
    }
)
"""Completion fields mapped to TGI's parameters, or refused below when set."""
_CHAT_DROPPED = frozenset({"priority", "cache_salt"})
"""The gateway's fields for vLLM; TGI's Messages API has neither."""


def _refuse(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"`{param}` is not supported by TGI replicas: {why}", param=param)


def generate_inputs(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, list):
        raise _refuse("prompt", "TGI's /generate takes one prompt per request; send one string.")
    if not isinstance(prompt, str) or not prompt:
        raise _refuse("prompt", "TGI's /generate takes a non-empty text prompt (not token ids).")
    return prompt


def _stops(stop: Any) -> tuple[str, ...]:
    stops = stop_strings(stop)
    if stops is None:
        raise InvalidRequest("`stop` must be a string or a list of strings.", param="stop")
    return stops


def _is_set(value: Any, neutral: object) -> bool:
    return value is not None and value != neutral


def generate_parameters(body: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``/generate``'s parameters for an OpenAI completion request, and its stop strings."""
    for key, value in body.items():
        if key not in _NO_EFFECT and key not in _MAPPED and value is not None:
            raise _refuse(key, "TGI's /generate has no such parameter.")
    if _is_set(body.get("n"), 1):
        raise _refuse("n", "TGI generates one choice per request.")
    if body.get("best_of") not in (None, 0, 1):
        raise _refuse("best_of", "TGI's best_of cannot be streamed, and the gateway streams from TGI.")
    if body.get("logprobs") is not None:
        raise _refuse("logprobs", "token logprobs are not mapped from TGI's answer.")
    if body.get("echo"):
        raise _refuse("echo", "TGI returns the completion only.")
    if body.get("suffix"):
        raise _refuse("suffix", "TGI has no insertion mode.")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "TGI's /generate has no logit bias.")
    if _is_set(body.get("presence_penalty"), 0):
        raise _refuse(
            "presence_penalty", "TGI's /generate has only frequency_penalty and repetition_penalty."
        )
    max_tokens = body.get("max_tokens")
    if max_tokens == 0:
        raise InvalidRequest(
            "TGI generates at least one token: `max_tokens` must be 1 or more.", param="max_tokens"
        )
    parameters: dict[str, Any] = {
        "max_new_tokens": DEFAULT_COMPLETION_MAX_TOKENS if max_tokens is None else max_tokens,
        "details": True,
        "return_full_text": False,
    }
    temperature = body.get("temperature")
    greedy = temperature == 0
    parameters["do_sample"] = not greedy
    if not greedy:
        if temperature is not None:
            parameters["temperature"] = temperature
        top_p, top_k, typical_p = body.get("top_p"), body.get("top_k"), body.get("typical_p")
        if top_p is not None and top_p < 1:
            parameters["top_p"] = top_p
        if top_k is not None and top_k > 0:
            parameters["top_k"] = top_k
        if typical_p is not None and typical_p < 1:
            parameters["typical_p"] = typical_p
    stops = _stops(body.get("stop"))
    if stops:
        parameters["stop"] = list(stops)
    for name in ("seed", "frequency_penalty", "repetition_penalty"):
        if body.get(name) is not None:
            parameters[name] = body[name]
    model = body.get("model")
    if isinstance(model, str) and model and model != "tgi":
        parameters["adapter_id"] = model
    return parameters, stops


def chat_body(body: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The Messages API body for an OpenAI chat request, and its stop strings."""
    if _is_set(body.get("n"), 1):
        raise _refuse("n", "TGI generates one choice per request.")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "TGI's Messages API ignores it.")
    chat = {k: v for k, v in body.items() if v is not None and k not in _CHAT_DROPPED}
    chat.pop("n", None)
    chat.pop("logit_bias", None)
    limit = chat.pop("max_completion_tokens", None)
    if limit is not None and "max_tokens" not in chat:
        chat["max_tokens"] = limit
    stops = _stops(chat.pop("stop", None))
    if stops:
        chat["stop"] = list(stops)
    top_p = chat.get("top_p")
    if isinstance(top_p, int | float) and (top_p >= 1 or chat.get("temperature") == 0):
        del chat["top_p"]
    return chat, stops
