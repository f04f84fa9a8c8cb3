"""llama.cpp requests: an OpenAI ``/completions`` body as the native ``POST /completion`` body.

``prompt`` (a string, or one prompt given as token ids), ``max_tokens`` -> ``n_predict`` (16 when
absent: OpenAI's default for completions, where the server's own is no limit), ``stop`` (always a
list), ``temperature``, ``top_p``, ``seed``, ``presence_penalty``, ``frequency_penalty``,
``logit_bias`` (llama.cpp takes OpenAI's object form) and the server's own sampling fields
(``top_k``, ``min_p``, ...) as they are; ``cache_prompt`` on. Refused (400, naming the field): ``n``
or ``best_of`` above 1, ``logprobs``, ``echo``, ``suffix``, several prompts, and the native
``n_probs``/``n_cmpl`` whose output the OpenAI answer cannot carry.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest

__all__ = ["completion_request"]

_DROPPED = frozenset(
    {
        "stream_options",  # the usage chunk is always written (the relay drops it unless asked for)
        "user",
        # these shape only the native answer, which is read here, not relayed
        "response_fields",
        "return_tokens",
        "timings_per_token",
        "return_progress",
    }
)
_MAPPED = frozenset({"prompt", "max_tokens", "stop", "stream", "n", "best_of", "logprobs", "echo", "suffix"})
"""OpenAI fields read here (renamed, or checked and left out); every other field is sent as it is."""


def _is_set(value: Any) -> bool:
    return value is not None and value is not False and value != ""


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name in ("n", "best_of"):
        value = body.get(name)
        if value is not None and value != 1:
            raise InvalidRequest(
                f"llama.cpp replicas generate one completion: `{name}` must be 1.", param=name
            )
    for name in ("logprobs", "echo", "suffix"):
        if _is_set(body.get(name)):
            raise InvalidRequest(f"`{name}` is not supported by llama.cpp replicas.", param=name)
    if _is_set(body.get("n_probs")) and body["n_probs"] != 0:
        raise InvalidRequest("`n_probs` is not supported by llama.cpp replicas.", param="n_probs")
    n_cmpl = body.get("n_cmpl")
    if n_cmpl is not None and n_cmpl != 1:
        raise InvalidRequest(
            "llama.cpp replicas generate one completion: `n_cmpl` must be 1.", param="n_cmpl"
        )


def _prompt(prompt: Any) -> str | list[int]:
    """One prompt: a string, or token ids; a list of one of those is that one prompt."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return prompt
    raise InvalidRequest(
        "llama.cpp replicas take one prompt: a string or a list of token ids.", param="prompt"
    )


def completion_request(body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """The native ``/completion`` body for an OpenAI ``/completions`` body."""
    _refuse_unsupported(body)
    prompt = _prompt(body.get("prompt"))
    native = {k: v for k, v in body.items() if k not in _MAPPED and k not in _DROPPED and v is not None}
    native["prompt"] = prompt
    max_tokens = body.get("max_tokens")  # OpenAI's completions default 16, as the other kinds; the
    native["n_predict"] = 16 if max_tokens is None else max_tokens  # server's own is "until EOS"
    stop = body.get("stop")
    if stop is not None:
        native["stop"] = [stop] if isinstance(stop, str) else stop
    native["stream"] = stream
    native.setdefault("cache_prompt", True)
    return native
