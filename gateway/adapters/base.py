"""The seam between the gateway's OpenAI request and a backend's own API: ``Adapter``.

A replica's ``kind`` (``gateway.replicas.pools.Replica.kind``) names its adapter. For each attempt,
``CallUpstream`` asks the replica's adapter for an ``Exchange``::

    exchange = adapter.exchange(path, body, root, stream=...)   # None: OpenAI mode, sent as it is
    response = TranslatedResponse(await client.post(exchange.url, exchange.body, ...), exchange.translator)

The translated response behaves like the backend's OpenAI mode would: a plain answer's body is an
OpenAI JSON response, a stream's chunks are OpenAI SSE events ending in a usage chunk and
``[DONE]``, a 4xx body is an OpenAI error envelope (the status kept). Everything after it (the SSE
relay, accounting, retries, breakers) is the same for every kind. An adapter also names its
health page and reads its load page into a ``ReplicaLoad`` for the ``load_aware`` strategy.

An adapter refuses what its backend cannot do (``n > 1`` on a native API, say) with an
``InvalidRequest`` (400) before anything is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from gateway.adapters.load import ReplicaLoad, parse_vllm_metrics

__all__ = [
    "NO_EFFECT_FIELDS",
    "Adapter",
    "Exchange",
    "NativeResponse",
    "StreamTranslator",
    "TranslatedResponse",
    "Translator",
]


NO_EFFECT_FIELDS = frozenset(
    {
        "stream_options",
        "user",
        "metadata",
        "store",
        "service_tier",
        "priority",
        "cache_salt",
        "safety_identifier",
        "prompt_cache_key",
        "parallel_tool_calls",
    }
)
"""OpenAI request fields (and the gateway's ``priority`` and ``cache_salt``) that never change the
output: a native adapter drops them rather than refusing them."""


class NativeResponse(Protocol):
    """The upstream response as the HTTP client gives it (``gateway.replicas.client.UpstreamResponse``)."""

    status: int
    content_type: str

    @property
    def retry_after(self) -> str | None: ...

    async def read(self) -> bytes: ...

    def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...

    def release(self) -> None: ...


class StreamTranslator(Protocol):
    """One stream's translation, fed the native body's bytes as they arrive."""

    def feed(self, chunk: bytes) -> bytes:
        """OpenAI SSE bytes for what ``chunk`` completes (b"" while an event is incomplete); raises
        ``UpstreamProtocolError`` on a malformed native event."""
        ...

    def end(self) -> bytes:
        """What is left once the native stream closed: b"" unless the backend ended it properly, so a
        stream cut off mid-way stays cut off (the relay then reports it)."""
        ...


class Translator(Protocol):
    """Turns one native answer into the OpenAI answer the client expects."""

    def body(self, payload: bytes) -> bytes:
        """A 200 body as an OpenAI JSON response (with ``usage`` and finish reasons)."""
        ...

    def error(self, status: int, payload: bytes) -> bytes:
        """A non-200 body as an OpenAI error envelope (``{"error": {message, type, param, code}}``)."""
        ...

    def stream(self) -> StreamTranslator:
        """A fresh translator for a 200 stream's body."""
        ...


@dataclass(frozen=True, slots=True)
class Exchange:
    """One attempt in the backend's native form."""

    url: str
    body: bytes
    translator: Translator
    stream: bool


class TranslatedResponse:
    """A native response that reads as the OpenAI one (``UpstreamResponse``'s shape)."""

    def __init__(self, native: NativeResponse, exchange: Exchange) -> None:
        self._native = native
        self._translator = exchange.translator
        self.status = native.status
        is_stream = exchange.stream and native.status == 200
        self.content_type = "text/event-stream" if is_stream else "application/json"

    @property
    def retry_after(self) -> str | None:
        return self._native.retry_after

    async def read(self) -> bytes:
        payload = await self._native.read()
        if self.status == 200:
            return self._translator.body(payload)
        return self._translator.error(self.status, payload)

    async def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        stream = self._translator.stream()
        async for chunk in self._native.chunks(idle_s, first_s=first_s):
            out = stream.feed(chunk)
            if out:
                yield out
        tail = stream.end()
        if tail:
            yield tail

    def close(self) -> None:
        self._native.close()

    def release(self) -> None:
        self._native.release()


class Adapter:
    """A backend kind. This base is OpenAI mode: the request goes as it is to ``base_url`` + path,
    health is ``GET /health`` and load is vLLM's metric names (what most OpenAI servers expose)."""

    kind: ClassVar[str] = "openai"
    health_path: ClassVar[str] = "/health"
    """Probed at the replica's server root unless the pool's ``routing`` names another path or URL."""
    metrics_path: ClassVar[str] = "/metrics"
    """The load page at the server root, unless the replica sets ``metrics_url``."""

    def __init__(self, *, chat_template: str = "chatml") -> None:
        self.chat_template = chat_template
        """How chat messages become one prompt where the native API takes only text
        (``gateway.adapters.prompts``)."""

    def exchange(self, path: str, body: dict[str, Any], root: str, *, stream: bool) -> Exchange | None:
        """The native form of a request to ``path`` (``/chat/completions``, ``/completions``,
        ``/embeddings``, ``/responses``) whose OpenAI ``body`` already names the served model, for a
        server whose routes are under ``root`` (``base_url`` without its ``/v1``); None to send it in
        OpenAI mode, unchanged. ``InvalidRequest`` when the backend cannot serve it."""
        return None

    def parse_load(self, page: bytes) -> ReplicaLoad | None:
        """The load the replica's load page states; None when it states none."""
        return parse_vllm_metrics(page)
