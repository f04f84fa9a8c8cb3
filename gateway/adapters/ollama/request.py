"""Ollama requests: an OpenAI body as ``/api/chat``'s, ``/api/generate``'s or ``/api/embed``'s.

``/chat/completions`` sends ``messages``; ``/completions`` sends ``raw: true`` (OpenAI completions
apply no chat template); ``/embeddings`` sends ``truncate: false`` (OpenAI refuses an input longer
than the model's context; Ollama would cut it silently).

``stream`` is always sent explicitly (Ollama streams by default). Sampling goes into ``options``:
``max_completion_tokens``/``max_tokens`` -> ``num_predict`` (completions: 16 when absent, as OpenAI's
default), ``temperature`` and ``top_p`` (1.0 when absent: OpenAI's defaults, not the Modelfile's),
``stop`` (a list), ``seed``, ``frequency_penalty``, ``presence_penalty``, and vLLM's extras ``top_k``,
``min_p``, ``repetition_penalty`` (``repeat_penalty``). ``response_format`` ``json_object`` ->
``format: "json"``, ``json_schema`` -> ``format: <the schema>``; ``reasoning_effort`` -> ``think``
(``none`` -> false, ``low``/``medium``/``high`` as they are). Image parts with a ``data:`` URL become
the message's base64 ``images``. Fields with no effect on the output (``user``, ``metadata``,
``stream_options``, the gateway's ``priority`` and ``cache_salt``, ...) are dropped; anything else
Ollama cannot honour (``n > 1``, ``logprobs``, ``logit_bias``, ``tools``, ``echo``, ``suffix``, a list
of prompts, token-id inputs, remote image URLs, an unknown field) is refused with a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from gateway.adapters.base import NO_EFFECT_FIELDS
from gateway.errors import InvalidRequest

__all__ = ["COMPLETION_MAX_TOKENS", "chat_request", "completion_request", "embedding_request"]

COMPLETION_MAX_TOKENS = 16
"""OpenAI's ``max_tokens`` default for ``/completions`` (Ollama's own is no limit)."""

_NEUTRAL = frozenset({"model", "stream", *NO_EFFECT_FIELDS})
"""Request fields with no effect on the output: dropped (``model`` and ``stream`` are set apart)."""

_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
}
"""OpenAI (and vLLM extra) sampling fields -> Ollama ``options`` names."""

_OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0}
"""Sent when the request leaves them out, so the Modelfile's defaults (0.8, 0.9) do not apply."""

_THINK = {"none": False, "low": "low", "medium": "medium", "high": "high"}


# ---- requests ----------------------------------------------------------------------------------


def _refuse(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"`{param}` is not supported by Ollama replicas: {why}", param=param)


def _options(body: dict[str, Any], max_tokens: Any) -> dict[str, Any]:
    options: dict[str, Any] = dict(_OPENAI_DEFAULTS)
    for field, name in _OPTIONS.items():
        if body.get(field) is not None:
            options[name] = body[field]
    stop = body.get("stop")
    if isinstance(stop, str):
        options["stop"] = [stop]
    elif isinstance(stop, list) and stop:
        options["stop"] = stop
    elif stop is not None and stop != []:
        raise InvalidRequest("`stop` must be a string or a list of strings.", param="stop")
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    return options


def _check_common(body: dict[str, Any], known: frozenset[str]) -> None:
    """Refuse what Ollama cannot honour, and any field the mapping does not know."""
    n = body.get("n")
    if n is not None and n != 1:
        raise _refuse("n", "Ollama generates one choice per request.")
    if body.get("logit_bias"):
        raise _refuse("logit_bias", "Ollama has no logit bias.")
    for field, value in body.items():
        if value is not None and field not in known and field not in _NEUTRAL:
            raise _refuse(field, "the native API has no such parameter.")


_CHAT_FIELDS = frozenset(
    {
        "messages",
        "n",
        "logit_bias",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "response_format",
        "reasoning_effort",
        "logprobs",
        "top_logprobs",
        "tools",
        "tool_choice",
        *_OPTIONS,
    }
)
_COMPLETION_FIELDS = frozenset(
    {"prompt", "n", "best_of", "logit_bias", "max_tokens", "stop", "logprobs", "echo", "suffix", *_OPTIONS}
)
_EMBEDDING_FIELDS = frozenset({"input", "encoding_format", "dimensions"})


def _image(part: dict[str, Any], param: str) -> str:
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise _refuse(param, "Ollama takes images as base64 data (a data: URL), not remote URLs.")
    return url.split(";base64,", 1)[1]


def _message(message: Any, index: int) -> dict[str, Any]:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise InvalidRequest("Each message must be an object.", param=param)
    role = message.get("role")
    if role in ("tool", "function") or message.get("tool_calls") or message.get("function_call"):
        raise _refuse(param, "tool calls are not mapped to Ollama's tools.")
    if role not in ("system", "developer", "user", "assistant"):
        raise InvalidRequest("A message needs a role.", param=f"{param}.role")
    content = message.get("content")
    texts: list[str] = []
    images: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
            elif kind == "image_url":
                images.append(_image(part, f"{param}.content[{j}]"))
            else:
                raise _refuse(f"{param}.content[{j}]", "Ollama takes text and images only.")
    elif content is not None:
        raise InvalidRequest("A message's content must be text or a list of parts.", param=param)
    native: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": "".join(texts)}
    if images:
        native["images"] = images
    return native


def _format(response_format: Any) -> Any:
    """Ollama's ``format`` for OpenAI's ``response_format``; None: plain text."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise InvalidRequest(
                "`response_format.json_schema.schema` must be a JSON schema object.",
                param="response_format.json_schema.schema",
            )
        return schema
    raise _refuse("response_format", "Ollama formats text, JSON (`json_object`) or a JSON schema.")


def chat_request(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    _check_common(body, _CHAT_FIELDS)
    if body.get("logprobs"):
        raise _refuse("logprobs", "the gateway does not map Ollama's log probabilities.")
    if body.get("top_logprobs"):
        raise _refuse("top_logprobs", "the gateway does not map Ollama's log probabilities.")
    if body.get("tools"):
        raise _refuse("tools", "tool calls are not mapped to Ollama's tools.")
    if body.get("tool_choice") not in (None, "none", "auto"):
        raise _refuse("tool_choice", "tool calls are not mapped to Ollama's tools.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("`messages` must be a non-empty list.", param="messages")
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    native: dict[str, Any] = {
        "model": body["model"],
        "messages": [_message(m, i) for i, m in enumerate(messages)],
        "stream": stream,
        "options": _options(body, max_tokens),
    }
    form = _format(body.get("response_format"))
    if form is not None:
        native["format"] = form
    effort = body.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str) or effort not in _THINK:
            raise _refuse("reasoning_effort", "Ollama's levels are none, low, medium and high.")
        native["think"] = _THINK[effort]
    return native


def _prompt(prompt: Any) -> str:
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    raise _refuse("prompt", "Ollama takes one prompt as text (not a list of prompts, nor token ids).")


def completion_request(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    _check_common(body, _COMPLETION_FIELDS)
    if body.get("best_of") not in (None, 0, 1):
        raise _refuse("best_of", "Ollama generates one choice per request.")
    if body.get("logprobs") is not None:
        raise _refuse("logprobs", "the gateway does not map Ollama's log probabilities.")
    if body.get("echo"):
        raise _refuse("echo", "Ollama does not repeat the prompt.")
    if body.get("suffix"):
        raise _refuse("suffix", "Ollama fills in the middle only through a template, not in raw mode.")
    max_tokens = body.get("max_tokens")
    if max_tokens == 0:
        raise _refuse("max_tokens", "Ollama reads num_predict 0 as no limit.")
    return {
        "model": body["model"],
        "prompt": _prompt(body.get("prompt")),
        "raw": True,
        "stream": stream,
        "options": _options(body, COMPLETION_MAX_TOKENS if max_tokens is None else max_tokens),
    }


def embedding_request(body: dict[str, Any]) -> dict[str, Any]:
    _check_common(body, _EMBEDDING_FIELDS)
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise _refuse("input", "Ollama embeds text, not token ids.")
    native: dict[str, Any] = {"model": body["model"], "input": texts, "truncate": False}
    if body.get("dimensions") is not None:
        native["dimensions"] = body["dimensions"]
    return native
