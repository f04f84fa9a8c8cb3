"""One Responses request as a turn of a conversation: its input items, and the response it got.

``input_items`` gives a request's ``input`` as items with ids (a string is one user message), as they
are stored and listed by ``GET /v1/responses/{id}/input_items``. ``Turn`` (a result filter) stores the
answer as it goes out: the JSON body, or the stream's ``response.completed`` /
``response.incomplete`` event, before the client gets it. A failed request has no such answer, and
nothing is stored.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from gateway.pipeline import BytesResult, Call, StreamResult
from gateway.responses.store import ResponseStore, StoredResponse

__all__ = ["Turn", "input_items"]

logger = logging.getLogger("sortyard.responses")
_FINAL = (b'"response.completed"', b'"response.incomplete"')
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def _id(kind: str) -> str:
    return f"{_ID_PREFIX.get(kind, 'item')}_{secrets.token_hex(24)}"


def _item(given: dict[str, Any]) -> dict[str, Any]:
    item = dict(given)
    kind = item.setdefault("type", "message")
    if kind == "message" and isinstance(item.get("content"), str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        item["content"] = [{"type": part, "text": item["content"]}]
    item.setdefault("id", _id(kind))
    return item


def input_items(given: Any) -> list[dict[str, Any]]:
    """A request's ``input`` as items with ids (a string: one user message)."""
    if isinstance(given, str):
        return [_item({"type": "message", "role": "user", "content": given})]
    if isinstance(given, list):
        return [_item(item) for item in given if isinstance(item, dict)]
    return []


def _decode(payload: bytes) -> dict[str, Any] | None:
    try:
        document = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return None
    return document if isinstance(document, dict) else None


class Turn:
    """A request whose response is to be stored (``store`` not false). The response is stored before
    the client has it (the JSON body, or the stream's last event), so a client that continues the
    conversation at once always finds it."""

    def __init__(self, store: ResponseStore, items: list[dict[str, Any]], previous_id: str | None) -> None:
        self.store = store
        self.items = items
        """The whole conversation's input: the earlier turns' items, then this request's."""
        self.previous_id = previous_id
        self.stored: StoredResponse | None = None

    async def watch(self, call: Call, result: BytesResult | StreamResult) -> BytesResult | StreamResult:
        """The result filter: store the response as it goes out."""
        if isinstance(result, BytesResult):
            if result.status == 200:
                await self._keep(call, _decode(result.body))
            return result
        return StreamResult(self._tap(call, result.events), result.status, result.content_type)

    async def _tap(self, call: Call, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in events:
            if _FINAL[0] in chunk or _FINAL[1] in chunk:  # the relay yields whole events
                await self._keep(call, _final_response(chunk))
            yield chunk

    async def _keep(self, call: Call, response: dict[str, Any] | None) -> None:
        if response is None or not isinstance(response.get("id"), str):
            return
        response["previous_response_id"] = self.previous_id
        response["store"] = True
        self.stored = StoredResponse(response, self.items)
        if not await self.store.put(call.tenant, self.stored, call.policy.responses.ttl_s):
            logger.warning("response %s was not stored", self.stored.id)


def _final_response(chunk: bytes) -> dict[str, Any] | None:
    """The response of the ``response.completed`` (or ``.incomplete``) event in ``chunk``."""
    for event in chunk.split(b"\n\n"):
        data = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
        document = _decode(data) if data else None
        if document is not None and document.get("type") in ("response.completed", "response.incomplete"):
            response = document.get("response")
            return response if isinstance(response, dict) else None
    return None
