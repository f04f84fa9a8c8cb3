"""``kind: llamacpp``: llama.cpp's HTTP server (``llama-server``), read as the OpenAI API.

- ``/completions`` goes to the native ``POST /completion``: ``prompt`` (a string, or one prompt given
  as token ids), ``max_tokens`` -> ``n_predict`` (16 when absent: OpenAI's default for completions,
  where the server's own is no limit), ``stop`` (always a list), ``temperature``,
  ``top_p``, ``seed``, ``presence_penalty``, ``frequency_penalty``, ``logit_bias`` (llama.cpp takes
  OpenAI's object form) and the server's own sampling fields (``top_k``, ``min_p``, ...) as they
  are; ``cache_prompt`` on. Refused (400, naming the field): ``n`` or ``best_of`` above 1,
  ``logprobs``, ``echo``, ``suffix``, several prompts, and the native ``n_probs``/``n_cmpl`` whose
  output the OpenAI answer cannot carry. The answer's ``content`` is the text; usage is
  ``tokens_evaluated`` (the whole prompt, the part the prompt cache served included: ``timings``'
  ``prompt_n`` counts only what was computed) and ``tokens_predicted``; ``stop_type`` ``eos`` or
  ``word`` finishes ``stop``, ``limit`` finishes ``length`` (older servers: ``stopped_eos``,
  ``stopped_word``, ``stopped_limit``). A stream's ``data:`` events carry ``content`` pieces, the
  last one ``"stop": true`` and the counts.
- ``/chat/completions`` and ``/embeddings`` go to llama.cpp's own OpenAI mode (``/v1/...``), which
  applies the model's real chat template; its answers are OpenAI's already, only ``model`` (the
  server's alias or model path) becomes the request's.
- ``/responses`` is sent in OpenAI mode, unchanged.
- Errors (``{"error": {"code", "message", "type"}}``, also as a ``data:`` event mid-stream) become
  OpenAI envelopes with the status kept and llama.cpp's ``type`` (``exceed_context_size_error``, ...)
  as the ``code``.
- Health ``GET /health`` (503 while the model loads). Load: ``GET /slots`` (a JSON list: the slots
  ``is_processing`` are the running requests, the tokens they hold, ``n_prompt_tokens``, over the
  slots' ``n_ctx`` the KV use; it shows no queue), or, where the replica's
  ``metrics_url`` points at ``/metrics`` (``--metrics``), ``llamacpp:requests_processing`` (running),
  ``llamacpp:requests_deferred`` (waiting) and ``llamacpp:kv_cache_usage_ratio`` (older servers).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from gateway.adapters.base import Adapter, Exchange
from gateway.adapters.load import ReplicaLoad, fraction, prometheus_values
from gateway.adapters.shapes import DONE, Lines, OpenAIAnswer, decode_event, error_body, sse_data
from gateway.errors import InvalidRequest, UpstreamProtocolError

__all__ = ["LlamaCppAdapter"]

_encode = msgspec.json.encode
_WHAT = "llama.cpp"

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
_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}

_PROCESSING = b"llamacpp:requests_processing"
_DEFERRED = b"llamacpp:requests_deferred"
_KV_RATIO = b"llamacpp:kv_cache_usage_ratio"


class LlamaCppAdapter(Adapter):
    """llama.cpp's server: native ``/completion``, OpenAI mode for chat and embeddings."""

    kind: ClassVar[str] = "llamacpp"
    metrics_path: ClassVar[str] = "/slots"

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        model = str(body.get("model", ""))
        if path == "/completions":
            native = _completion_request(body, stream=stream)
            return Exchange(root + "/completion", _encode(native), _CompletionTranslator(model), stream)
        if path in ("/chat/completions", "/embeddings"):
            return Exchange(root + "/v1" + path, _encode(body), _OpenAIModeTranslator(model), stream)
        return None

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        start = page.lstrip()[:1]
        if start == b"[":
            return _slots_load(page)
        if start == b"{":  # an error object: the page is switched off (--no-slots)
            return None
        return _metrics_load(page)


# -- the request ---------------------------------------------------------------------------------


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


def _completion_request(body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
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


# -- the answer ----------------------------------------------------------------------------------


def _count(answer: dict[str, Any], name: str, timing: str) -> int:
    value = answer.get(name)
    if type(value) is int:
        return value
    timings = answer.get("timings")
    if isinstance(timings, dict) and type(timings.get(timing)) is int:
        # timings.prompt_n counts only the prompt tokens computed; cache_n holds the rest
        extra = timings.get("cache_n", 0) if timing == "prompt_n" else 0
        return int(timings[timing]) + (extra if type(extra) is int else 0)
    raise UpstreamProtocolError(f"{_WHAT} sent a finished answer without `{name}`")


def _usage(answer: dict[str, Any]) -> tuple[int, int]:
    return _count(answer, "tokens_evaluated", "prompt_n"), _count(answer, "tokens_predicted", "predicted_n")


def _finish_reason(answer: dict[str, Any]) -> str:
    stop_type = answer.get("stop_type")
    if isinstance(stop_type, str):
        return _FINISH.get(stop_type, "stop")
    return "length" if answer.get("stopped_limit") is True else "stop"


def _event(payload: bytes) -> dict[str, Any]:
    event = decode_event(payload, _WHAT)
    if not isinstance(event, dict):
        raise UpstreamProtocolError(f"{_WHAT} sent an answer that is not a JSON object")
    return event


def _text(answer: dict[str, Any]) -> str:
    content = answer.get("content", "")
    if not isinstance(content, str):
        raise UpstreamProtocolError(f"{_WHAT} sent a `content` that is not text")
    return content


def _error_fields(error: Any, status: int) -> tuple[int, str | None, str | None]:
    """Status, message and llama.cpp's ``type`` of an ``error`` value (an object or a bare string)."""
    if isinstance(error, str):
        return status, error, None
    if not isinstance(error, dict):
        return status, None, None
    code, message, kind = error.get("code"), error.get("message"), error.get("type")
    if type(code) is int and 400 <= code <= 599:
        status = code
    return status, message if isinstance(message, str) else None, kind if isinstance(kind, str) else None


def _error(status: int, payload: bytes) -> bytes:
    """llama.cpp's error body (or any text) as an OpenAI envelope, ``status`` kept."""
    message: str | None = None
    kind: str | None = None
    try:
        document = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        document = None
    if isinstance(document, dict) and "error" in document:
        _, message, kind = _error_fields(document["error"], status)
    if not message:
        message = payload.decode("utf-8", "replace").strip()[:500] or f"HTTP {status}"
    return error_body(status, message, code=kind or "upstream_status")


def _error_event(error: Any) -> bytes:
    status, message, kind = _error_fields(error, 500)
    body = error_body(status, message or f"{_WHAT} failed mid-stream", code=kind or "upstream_error")
    return b"data: " + body + b"\n\n"


class _CompletionTranslator:
    """A native ``/completion`` answer as an OpenAI text completion."""

    def __init__(self, model: str) -> None:
        self.model = model

    def body(self, payload: bytes) -> bytes:
        answer = _event(payload)
        prompt_tokens, completion_tokens = _usage(answer)
        openai = OpenAIAnswer(self.model, chat=False)
        return openai.body(_text(answer), _finish_reason(answer), prompt_tokens, completion_tokens)

    def error(self, status: int, payload: bytes) -> bytes:
        return _error(status, payload)

    def stream(self) -> _CompletionStream:
        return _CompletionStream(OpenAIAnswer(self.model, chat=False))


class _CompletionStream:
    """Native ``data:`` events in, OpenAI text-completion chunks out."""

    def __init__(self, answer: OpenAIAnswer) -> None:
        self._answer = answer
        self._lines = Lines()
        self._ended = False

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for line in self._lines.feed(chunk):
            payload = sse_data(line)
            if payload is None or self._ended:
                continue
            event = _event(payload)
            if "error" in event:
                out.append(_error_event(event["error"]))
                self._ended = True
                continue
            out.append(self._answer.delta(_text(event)))
            if event.get("stop") is True:
                out.append(self._answer.finish(_finish_reason(event), *_usage(event)))
                self._ended = True
        return b"".join(out)

    def end(self) -> bytes:
        return b""  # the finish went out with the last event; without it the stream was cut


class _OpenAIModeTranslator:
    """llama.cpp's OpenAI mode: its answer as it is, naming the request's model; errors normalised."""

    def __init__(self, model: str) -> None:
        self.model = model

    def body(self, payload: bytes) -> bytes:
        answer = _event(payload)
        if "model" in answer:
            answer["model"] = self.model
        return _encode(answer)

    def error(self, status: int, payload: bytes) -> bytes:
        return _error(status, payload)

    def stream(self) -> _OpenAIModeStream:
        return _OpenAIModeStream(self.model)


class _OpenAIModeStream:
    """Each ``data:`` event passed on as its own event, ``model`` set, an error event normalised."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._lines = Lines()

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for line in self._lines.feed(chunk):
            payload = sse_data(line)
            if payload is None:
                continue
            if payload.strip() == b"[DONE]":
                out.append(DONE)
                continue
            event = _event(payload)
            if "error" in event:
                out.append(_error_event(event["error"]))
                continue
            if "model" in event:
                event["model"] = self.model
            out.append(b"data: " + _encode(event) + b"\n\n")
        return b"".join(out)

    def end(self) -> bytes:
        return b""  # [DONE] went out as it came; without it the stream was cut


# -- load ----------------------------------------------------------------------------------------


def _slots_load(page: bytes) -> ReplicaLoad | None:
    """Running: the slots ``is_processing``; KV: the tokens those slots hold (``n_prompt_tokens``: the
    prompt and what was generated so far) over every slot's ``n_ctx``; no queue on this page."""
    try:
        slots = msgspec.json.decode(page)
    except msgspec.DecodeError:
        return None
    if not isinstance(slots, list):
        return None
    running = held = capacity = 0
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        n_ctx = slot.get("n_ctx")
        capacity += n_ctx if type(n_ctx) is int and n_ctx > 0 else 0
        if slot.get("is_processing") is True:
            running += 1
            tokens = slot.get("n_prompt_tokens")
            held += tokens if type(tokens) is int and tokens > 0 else 0
    return ReplicaLoad(0.0, float(running), fraction(held / capacity) if capacity else 0.0)


def _metrics_load(page: bytes) -> ReplicaLoad | None:
    values = prometheus_values(page, (_PROCESSING, _DEFERRED, _KV_RATIO))
    if not values:
        return None
    kv = max((fraction(v) for v in values.get(_KV_RATIO, ())), default=0.0)
    return ReplicaLoad(sum(values.get(_DEFERRED, ())), sum(values.get(_PROCESSING, ())), kv)
