"""``ResponsesOverChat``: the Responses API served by a replica that speaks only chat completions.

It wraps the replica's own adapter. A ``/responses`` request becomes a ``/chat/completions`` request
(``gateway.adapters.responses.request``), which the inner adapter puts in its native form (or None:
OpenAI mode, ``base_url`` + ``/chat/completions``); the inner translator makes the answer OpenAI chat
JSON or SSE, and this one makes that a ``Response`` object or the Responses event stream. What comes
out reads like a server with its own ``/v1/responses``, so the relay (``ResponsesRelay``), the
accounting and the retries are the same as for one. Every other path goes to the inner adapter.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.adapters.base import Adapter, Exchange, StreamTranslator, Translator
from gateway.adapters.load import ReplicaLoad
from gateway.adapters.responses.answer import ResponseDraft
from gateway.adapters.responses.events import ResponseEvents
from gateway.adapters.responses.request import chat_request

__all__ = ["ResponsesOverChat"]

_encode = msgspec.json.encode


class _ChainedStream:
    """The inner stream translation (native -> chat SSE), then the Responses one."""

    def __init__(self, inner: StreamTranslator | None, events: ResponseEvents) -> None:
        self.inner = inner
        self.events = events

    def feed(self, chunk: bytes) -> bytes:
        if self.inner is not None:
            chunk = self.inner.feed(chunk)
        return self.events.feed(chunk) if chunk else b""

    def end(self) -> bytes:
        tail = self.inner.end() if self.inner is not None else b""
        out = self.events.feed(tail) if tail else b""
        return out + self.events.end()


def with_responses_param(payload: bytes) -> bytes:
    """A chat server's error naming the field the client sent: its ``param`` names the translated chat
    request's (``max_tokens``, ``response_format``, ``messages[1].content``), which the client never
    wrote. A message's index is not the input item's (``instructions`` and a call's output shift it),
    so a message names ``input`` whole."""
    try:
        body = msgspec.json.decode(payload)
        param = body["error"]["param"]
    except (msgspec.DecodeError, KeyError, TypeError):
        return payload
    if not isinstance(param, str):
        return payload
    renamed = _responses_param(param)
    if renamed == param:
        return payload
    body["error"]["param"] = renamed
    return _encode(body)


def _responses_param(param: str) -> str:
    head = param.partition(".")[0].partition("[")[0]
    if head in ("max_tokens", "max_completion_tokens"):
        return "max_output_tokens"
    if head == "response_format":
        return "text.format"
    if head == "messages":
        return "input"
    if head == "tools":
        return param.replace(".function.", ".", 1)
    return param


class ResponsesTranslator:
    """A chat answer (native, or OpenAI chat where ``inner`` is None) as the Responses answer."""

    def __init__(self, draft: ResponseDraft, inner: Translator | None) -> None:
        self.draft = draft
        self.inner = inner

    def body(self, payload: bytes) -> bytes:
        chat = self.inner.body(payload) if self.inner is not None else payload
        return self.draft.complete(chat)

    def error(self, status: int, payload: bytes) -> bytes:
        chat = self.inner.error(status, payload) if self.inner is not None else payload
        return with_responses_param(chat)

    def stream(self) -> StreamTranslator:
        inner = self.inner.stream() if self.inner is not None else None
        return _ChainedStream(inner, ResponseEvents(self.draft))


class ResponsesOverChat(Adapter):
    """The replica's ``inner`` adapter, with ``/responses`` served over its chat completions;
    ``base_url`` is the replica's OpenAI root (where OpenAI mode sends ``/chat/completions``)."""

    def __init__(self, inner: Adapter, base_url: str) -> None:
        super().__init__(chat_template=inner.chat_template)
        self.inner = inner
        self.base_url = base_url.rstrip("/")

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        if path != "/responses":
            return self.inner.exchange(path, body, root, stream=stream)
        chat = chat_request(body, stream=stream)
        draft = ResponseDraft(body)
        native = self.inner.exchange("/chat/completions", chat, root, stream=stream)
        if native is None:  # OpenAI mode: the chat request as it is
            url, payload, inner = self.base_url + "/chat/completions", _encode(chat), None
        else:
            url, payload, inner = native.url, native.body, native.translator
        return Exchange(url, payload, ResponsesTranslator(draft, inner), stream)

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        return self.inner.parse_load(page)
