"""Streams from complete responses, and complete responses from streams.

One stored form serves both kinds of client: an entry always holds the *complete* JSON response
(``chat.completion`` or ``text_completion``).

- :func:`replay_sse` turns it into the server-sent events an upstream would have streamed: for each
  choice a role chunk, the content (and tool-call) deltas, a finish-reason chunk; then the usage
  chunk only when the client asked for it (``stream_options.include_usage``, and then every other
  chunk carries ``"usage": null`` as OpenAI's do); then ``data: [DONE]``. Ids, ``created``, the model
  and ``system_fingerprint`` are the original response's.
- :class:`StreamAccumulator` watches a relayed stream and assembles the complete response from its
  deltas, so a streamed miss fills the cache for streaming and non-streaming clients alike. A stream
  that ended without ``[DONE]``, carried an error event, or left a choice without a finish reason
  builds nothing (it is not stored).

Storing complete responses rather than raw events keeps one format, one size check and one replay
path; the price is that a replay's content arrives in fewer, larger deltas than the original stream.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.cache.entry import Entry, EntryKind

DONE_EVENT = b"data: [DONE]\n\n"
_decode = msgspec.json.decode
_encode = msgspec.json.encode
_MESSAGE_FIELDS = ("role", "content", "refusal", "tool_calls", "function_call")


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + _encode(obj) + b"\n\n"


def _pieces(text: str, chunk_chars: int | None) -> list[str]:
    if not text:
        return []
    if not chunk_chars or len(text) <= chunk_chars:
        return [text]
    return [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)]


def replay_sse(entry: Entry, *, include_usage: bool, chunk_chars: int | None = None) -> bytes:
    """The whole SSE stream of a cached response, ``[DONE]`` included.

    ``chunk_chars`` splits long content into deltas of that many characters (default: one delta).
    Raises ``ValueError`` (``msgspec.DecodeError`` is one) when the payload is not a response object.
    """
    body = _decode(entry.body)
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise ValueError("cached payload is not a completion response")
    head: dict[str, Any] = {
        "id": body.get("id"),
        "object": "chat.completion.chunk" if entry.kind == EntryKind.CHAT else "text_completion",
        "created": body.get("created"),
        "model": body.get("model"),
    }
    for name in ("system_fingerprint", "service_tier"):
        if name in body:
            head[name] = body[name]
    if include_usage:
        head["usage"] = None
    choices = body["choices"]
    if entry.kind == EntryKind.CHAT:
        events = [
            _event({**head, "choices": [c]}) for choice in choices for c in _chat_deltas(choice, chunk_chars)
        ]
    else:
        events = [
            _event({**head, "choices": [c]}) for choice in choices for c in _text_deltas(choice, chunk_chars)
        ]
    if include_usage and body.get("usage") is not None:
        events.append(_event({**head, "choices": [], "usage": body["usage"]}))
    events.append(DONE_EVENT)
    return b"".join(events)


def _chat_deltas(choice: dict[str, Any], chunk_chars: int | None) -> list[dict[str, Any]]:
    index = choice.get("index", 0)
    message = choice.get("message") or {}
    content = message.get("content")
    out: list[dict[str, Any]] = []

    def delta(d: dict[str, Any], logprobs: Any = None, finish_reason: Any = None) -> None:
        out.append({"index": index, "delta": d, "logprobs": logprobs, "finish_reason": finish_reason})

    first: dict[str, Any] = {
        "role": message.get("role", "assistant"),
        "content": "" if content is not None else None,
    }
    if "refusal" in message:
        first["refusal"] = None
    delta(first)
    for name, value in message.items():  # e.g. a reasoning engine's "reasoning_content"
        if name not in _MESSAGE_FIELDS and value is not None:
            delta({name: value})
    logprobs = choice.get("logprobs")
    for piece in _pieces(content or "", chunk_chars):
        delta({"content": piece}, logprobs)
        logprobs = None  # all of them ride on the first content delta
    if logprobs is not None:
        delta({}, logprobs)
    for piece in _pieces(message.get("refusal") or "", chunk_chars):
        delta({"refusal": piece})
    for number, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        opening = {
            "index": number,
            "id": call.get("id"),
            "type": call.get("type", "function"),
            "function": {"name": function.get("name"), "arguments": ""},
        }
        delta({"tool_calls": [opening]})
        for piece in _pieces(function.get("arguments") or "", chunk_chars):
            delta({"tool_calls": [{"index": number, "function": {"arguments": piece}}]})
    if message.get("function_call") is not None:
        delta({"function_call": message["function_call"]})
    delta({}, None, choice.get("finish_reason"))
    return out


def _text_deltas(choice: dict[str, Any], chunk_chars: int | None) -> list[dict[str, Any]]:
    index = choice.get("index", 0)
    logprobs = choice.get("logprobs")
    out = []
    for piece in _pieces(choice.get("text") or "", chunk_chars):
        out.append({"text": piece, "index": index, "logprobs": logprobs, "finish_reason": None})
        logprobs = None
    out.append(
        {"text": "", "index": index, "logprobs": logprobs, "finish_reason": choice.get("finish_reason")}
    )
    return out


class _Choice:
    __slots__ = (
        "content",
        "extra",
        "finish_reason",
        "function_call",
        "logprobs",
        "refusal",
        "role",
        "text",
        "tools",
    )

    def __init__(self) -> None:
        self.role = "assistant"
        self.content: list[str] | None = None
        self.refusal: list[str] | None = None
        self.text: list[str] = []
        self.extra: dict[str, list[str]] = {}
        self.tools: dict[int, dict[str, Any]] = {}
        self.function_call: dict[str, str] | None = None
        self.logprobs: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def add_logprobs(self, logprobs: Any) -> None:
        if not isinstance(logprobs, dict):
            return
        if self.logprobs is None:
            self.logprobs = {}
        for name, value in logprobs.items():
            if isinstance(value, list):
                self.logprobs.setdefault(name, []).extend(value)
            elif value is not None:
                self.logprobs[name] = value


class StreamAccumulator:
    """Assembles the complete response of a stream from its events (see the module docstring).

    Feed it the bytes the client is sent (whole events, as the relay yields them), then call
    :meth:`entry`. It never raises on bad input: it just builds nothing.
    """

    def __init__(self) -> None:
        self._head: dict[str, Any] | None = None
        self._kind = EntryKind.CHAT
        self._choices: dict[int, _Choice] = {}
        self._usage: Any = None
        self._buffer = b""
        self.is_done = False
        self.is_failed = False

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream."""
        if self.is_failed or self.is_done:
            return
        data = self._buffer + data if self._buffer else data
        end = data.rfind(b"\n\n")
        if end < 0:
            self._buffer = data
            return
        self._buffer = data[end + 2 :]
        for event in data[:end].split(b"\n\n"):
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())
                if self.is_failed or self.is_done:
                    return

    def _data(self, payload: bytes) -> None:
        if payload == b"[DONE]":
            self.is_done = True
            return
        try:
            chunk = _decode(payload)
        except msgspec.DecodeError:
            self.is_failed = True
            return
        if not isinstance(chunk, dict) or "error" in chunk or not isinstance(chunk.get("choices", []), list):
            self.is_failed = True
            return
        if self._head is None:
            self._head = {
                k: chunk[k]
                for k in ("id", "created", "model", "system_fingerprint", "service_tier")
                if k in chunk
            }
            if chunk.get("object") == "text_completion":
                self._kind = EntryKind.COMPLETION
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        for delta_choice in chunk.get("choices") or ():
            if isinstance(delta_choice, dict):
                self._choice(delta_choice)

    def _choice(self, c: dict[str, Any]) -> None:
        index = c.get("index", 0)
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice()
        if c.get("finish_reason"):
            choice.finish_reason = c["finish_reason"]
        choice.add_logprobs(c.get("logprobs"))
        if self._kind == EntryKind.COMPLETION:
            if isinstance(c.get("text"), str):
                choice.text.append(c["text"])
            return
        delta = c.get("delta")
        if not isinstance(delta, dict):
            return
        for name, value in delta.items():
            if value is None:
                continue
            if name == "role":
                choice.role = value
            elif name == "content":
                choice.content = (choice.content or []) + [value]
            elif name == "refusal":
                choice.refusal = (choice.refusal or []) + [value]
            elif name == "tool_calls":
                for call in value:
                    _merge_tool_call(choice.tools, call)
            elif name == "function_call":
                fc = choice.function_call or {"name": "", "arguments": ""}
                fc["name"] += value.get("name") or ""
                fc["arguments"] += value.get("arguments") or ""
                choice.function_call = fc
            elif isinstance(value, str):
                choice.extra.setdefault(name, []).append(value)

    def entry(self, usage: dict[str, Any] | None = None) -> Entry | None:
        """The complete response, or None if the stream did not finish cleanly.

        ``usage`` fills in the usage object when the stream's own usage chunk was not seen (for
        example when the relay dropped it because this client did not ask for it).
        """
        if not self.is_done or self.is_failed or self._head is None or not self._choices:
            return None
        if any(c.finish_reason is None for c in self._choices.values()):
            return None
        head = self._head
        body: dict[str, Any] = {
            "id": head.get("id"),
            "object": "chat.completion" if self._kind == EntryKind.CHAT else "text_completion",
            "created": head.get("created"),
            "model": head.get("model"),
            "choices": [self._build_choice(i, c) for i, c in sorted(self._choices.items())],
        }
        final_usage = self._usage if self._usage is not None else usage
        if final_usage is not None:
            body["usage"] = final_usage
        for name in ("system_fingerprint", "service_tier"):
            if name in head:
                body[name] = head[name]
        return Entry(self._kind, _encode(body))

    def _build_choice(self, index: int, c: _Choice) -> dict[str, Any]:
        if self._kind == EntryKind.COMPLETION:
            return {
                "index": index,
                "text": "".join(c.text),
                "logprobs": c.logprobs,
                "finish_reason": c.finish_reason,
            }
        message: dict[str, Any] = {
            "role": c.role,
            "content": None if c.content is None else "".join(c.content),
        }
        if c.content is None and not c.tools and c.function_call is None:
            message["content"] = ""
        if c.refusal is not None:
            message["refusal"] = "".join(c.refusal)
        for name, parts in c.extra.items():
            message[name] = "".join(parts)
        if c.tools:
            message["tool_calls"] = [c.tools[i] for i in sorted(c.tools)]
        if c.function_call is not None:
            message["function_call"] = c.function_call
        return {"index": index, "message": message, "logprobs": c.logprobs, "finish_reason": c.finish_reason}


def _merge_tool_call(tools: dict[int, dict[str, Any]], call: Any) -> None:
    if not isinstance(call, dict):
        return
    number = call.get("index", len(tools))
    known = tools.get(number)
    function = call.get("function") or {}
    if known is None:
        known = tools[number] = {
            "id": call.get("id"),
            "type": call.get("type") or "function",
            "function": {"name": function.get("name") or "", "arguments": ""},
        }
    else:
        if call.get("id"):
            known["id"] = call["id"]
        if function.get("name") and not known["function"]["name"]:
            known["function"]["name"] = function["name"]
    known["function"]["arguments"] += function.get("arguments") or ""
