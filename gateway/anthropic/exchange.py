"""``POST /v1/messages`` on the hot path: an ``HttpExchange`` that speaks Anthropic's wire format.

The caller's key comes in ``x-api-key`` (Anthropic's header; a bearer ``Authorization`` works too),
the body is translated into the chat completions request it means (``request.to_chat``) and runs the
one pipeline as that, and the answer leaves as a message, a Messages event stream or Anthropic's error
shape. Everything between (limits, caches, routing, retries, accounting, metrics, traces) is the chat
request's, so the two routes cannot drift apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from gateway.anthropic.answer import to_message
from gateway.anthropic.errors import from_openai_body
from gateway.anthropic.events import MessagesStream
from gateway.anthropic.params import MessagesParams
from gateway.anthropic.request import translate
from gateway.anthropic.routes import with_api_key
from gateway.errors import GatewayError, render
from gateway.instance import Gateway
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.proxy import HttpExchange, Receive, Scope, Send

__all__ = ["MessagesExchange"]


class MessagesExchange(HttpExchange):
    """One Messages request's arrival and answer."""

    def __init__(self, gateway: Gateway, scope: Scope, receive: Receive, send: Send) -> None:
        super().__init__(gateway, Endpoint.CHAT, scope, receive, send)
        self.headers = with_api_key(self.headers)
        self._stop: list[str] | None = None
        self._params: MessagesParams | None = None
        """The Messages fields of the translated request, once translated: errors name those."""

    def request_body(self, raw: bytes) -> bytes:
        chat, self._params = translate(raw)
        self._stop = chat.get("stop")
        return msgspec.json.encode(chat)

    async def deliver(self, call: Call, result: BytesResult | StreamResult) -> int:
        if isinstance(result, StreamResult):
            result = StreamResult(self._events(result.events, call.model or ""), result.status)
        elif result.status == 200:
            result = BytesResult(200, to_message(result.body, self._stop))
        else:
            result = BytesResult(
                result.status, from_openai_body(result.status, result.body, call.request_id, self._params)
            )
        return await super().deliver(call, result)

    def render(self, error: GatewayError) -> tuple[int, bytes, dict[str, str]]:
        status, body, extra = render(error)
        return status, from_openai_body(status, body, self._request_id or None, self._params), extra

    async def _events(self, events: AsyncIterator[bytes], model: str) -> AsyncIterator[bytes]:
        stream = MessagesStream(model, self._stop)
        try:
            async for chunk in events:
                out = stream.feed(chunk)
                if out:
                    yield out
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
